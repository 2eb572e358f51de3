"""Stock mlx_lm.dynamic_quant (mlx-cpu) for bench/alloc_quality.sh, on given calibration rows.

Usage: python bench/mlx_dynamic_side.py SRC_DIR OUT_DIR TARGET_BPW LOW_BITS HIGH_BITS CALIB_DIR ROWS
Its CLI downloads its calibration text from the network, which this machine cannot reach, so this
calls the same functions (estimate_sensitivities, estimate_threshold, quantize_model, save) on
ROWS rows of 512 tokens of the SOTU texts in CALIB_DIR (newest first, as `tq sensitivity` reads
them). Sensitivities are cached per (low, high, rows) beside OUT_DIR and measured in f32; the
model is then cast to bf16, as `mlx_lm.convert --dtype bfloat16` does (scales and biases are
then bf16, like our arms).
Run it with the system OpenBLAS preloaded or mlx-cpu is ~30x slower.
"""
import json
import sys
import time
from pathlib import Path

import numpy as np


def main():
    src, out, target, low, high, calib_dir, nrows = sys.argv[1:8]
    import mlx.core as mx
    from mlx_lm.quant.dynamic_quant import estimate_sensitivities, estimate_threshold
    from mlx_lm.utils import compute_bits_per_weight, load, quantize_model, save

    mx.set_default_device(mx.cpu)
    mx.random.seed(123)
    t0 = time.time()
    model, tokenizer, config = load(src, return_config=True)
    ids = []
    for f in sorted(Path(calib_dir).glob("*.txt"), reverse=True):
        ids += tokenizer.encode(f.read_text())
        if len(ids) >= 512 * int(nrows):
            break
    rows = np.array(ids[: 512 * int(nrows)], dtype=np.int32).reshape(-1, 512)
    low, high, target = int(low), int(high), float(target)
    # The sensitivities depend only on (low, high, rows), not on the target: keep them beside OUT.
    cache = Path(out).parent / f"mlx-dynamic-sens-{low}-{high}-{nrows}.json"
    if cache.exists():
        sens = json.loads(cache.read_text())
    else:
        sens = {k: float(v) for k, v in estimate_sensitivities(model, mx.array(rows), low, 64,
                                                                high, 64)}
        cache.write_text(json.dumps(sens))
    # Gradients in f32 (mlx-cpu has BLAS for f32 only: in bf16 one batch of 4 rows took > 12
    # min here), then the bf16 cast for the artifact, as `mlx_lm.convert --dtype bfloat16`.
    model.set_dtype(mx.bfloat16)
    config["torch_dtype"] = "bfloat16"
    threshold = estimate_threshold(model, sens, target_bpw=target, low_bits=low,
                                   low_group_size=64, high_bits=high, high_group_size=64)

    def predicate(p, m):
        if not hasattr(m, "to_quantized"):
            return False
        if sens[p] > threshold:
            return {"bits": high, "group_size": 64}
        return True

    model, config = quantize_model(model, config, group_size=64, bits=low,
                                   quant_predicate=predicate)
    bpw = compute_bits_per_weight(model)  # before save(), which releases the weights
    save(out, src, model, tokenizer, config)
    print(json.dumps({"bpw": bpw, "wall_s": time.time() - t0,
                      "high_modules": sum(1 for v in sens.values() if v > threshold)}))


if __name__ == "__main__":
    main()
