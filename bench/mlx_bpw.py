"""Bits per weight of MLX directories as stock mlx-lm computes them (bench helper, not a test).

Usage: python bench/mlx_bpw.py DIR...   (run with the system OpenBLAS preloaded: mlx-cpu)
Prints: | dir | mlx-lm bpw | tq_metadata bpw |
"""
import json
import sys
from pathlib import Path


def main():
    import mlx.core as mx
    from mlx_lm.utils import compute_bits_per_weight, load

    mx.set_default_device(mx.cpu)
    for d in sys.argv[1:]:
        model, _ = load(d)
        meta = json.loads((Path(d) / "tq_metadata.json").read_text())
        ours = (meta.get("allocation") or {}).get("achieved_bpw", meta.get("size", {}).get("bpw"))
        print(f"| {Path(d).name} | {compute_bits_per_weight(model):.7f} | {ours} |")


if __name__ == "__main__":
    main()
