#!/usr/bin/env python3
"""Bench (not a test): peak memory and wall time of `tq convert`.

1. Writes (once) a synthetic llama checkpoint of >= 3 GB into $TQ_CACHE/bench/synth-llama-3g:
   32 layers, hidden 2048, MLP 6144, 16 heads / 4 KV heads, vocabulary 32000, untied, bf16,
   4 shards + index (values drawn from a seeded pool of normals; structure is what matters).
2. Converts it at 4-bit g64 and reports peak RSS (getrusage of the child) and wall time.
3. Converts SmolLM2-135M (straight from its GGUF) at 4-bit g64 and reports the same.
Usage: python bench/convert_memory.py [--keep]   (env TQ_BIN, TQ_CACHE; --keep keeps the source)
"""
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
TQ_BIN = os.environ.get("TQ_BIN", str(ROOT / "build" / "tq"))
TQ_CACHE = pathlib.Path(os.environ.get("TQ_CACHE", pathlib.Path.home() / ".cache" / "turboquant"))
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

CFG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
    "num_hidden_layers": 32, "intermediate_size": 6144, "num_attention_heads": 16,
    "num_key_value_heads": 4, "rms_norm_eps": 1e-5, "vocab_size": 32000,
    "max_position_embeddings": 4096, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def tensor_shapes(c):
    d, f, v, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    hd = d // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    shards = [[("model.embed_tokens.weight", (v, d))]]
    for i in range(L):
        p = f"model.layers.{i}."
        layer = [(p + "input_layernorm.weight", (d,)), (p + "post_attention_layernorm.weight", (d,)),
                 (p + "self_attn.q_proj.weight", (d, d)), (p + "self_attn.k_proj.weight", (kv, d)),
                 (p + "self_attn.v_proj.weight", (kv, d)), (p + "self_attn.o_proj.weight", (d, d)),
                 (p + "mlp.gate_proj.weight", (f, d)), (p + "mlp.up_proj.weight", (f, d)),
                 (p + "mlp.down_proj.weight", (d, f))]
        if len(shards) < 1 + (i * 4) // L:
            shards.append([])
        shards[-1].extend(layer)
    shards[-1].extend([("model.norm.weight", (d,)), ("lm_head.weight", (v, d))])
    return shards


def write_checkpoint(d: pathlib.Path):
    if (d / "done").exists():
        return
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    rng = np.random.default_rng(7)
    pool = (rng.standard_normal(1 << 26, dtype=np.float32) * 0.02).view(np.uint32)
    pool = (pool >> 16).astype(np.uint16)  # bf16 bit patterns
    shards = tensor_shapes(CFG)
    weight_map, total = {}, 0
    for si, tensors in enumerate(shards):
        name = f"model-{si + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for n, s in tensors:
            nb = int(np.prod(s)) * 2
            header[n] = {"dtype": "BF16", "shape": list(s), "data_offsets": [off, off + nb]}
            off += nb
            weight_map[n] = name
        total += off
        hj = json.dumps(header).encode()
        hj += b" " * (-len(hj) % 8)
        with open(d / name, "wb") as f:
            f.write(struct.pack("<Q", len(hj)) + hj)
            for n, s in tensors:
                count = int(np.prod(s))
                if n.endswith("norm.weight"):
                    f.write(np.full(count, 0x3F80, np.uint16).tobytes())  # 1.0
                    continue
                start = int(rng.integers(0, pool.size))
                reps = -(-(start + count) // pool.size)
                chunk = np.tile(pool, reps)[start:start + count] if reps > 1 else pool[start:start + count]
                f.write(chunk.tobytes())
        print(f"wrote {name} ({off / 1e9:.2f} GB)", flush=True)
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (d / "config.json").write_text(json.dumps(CFG, indent=2))
    (d / "done").write_text("ok")


def time_v(cmd):
    """(wall s, peak RSS bytes, parsed --json stdout) of cmd under /usr/bin/time -v."""
    t0 = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    rss_kb = next(l for l in r.stderr.splitlines() if "Maximum resident" in l).split()[-1]
    return wall, int(rss_kb) * 1024, json.loads(r.stdout)


def main():
    keep = "--keep" in sys.argv
    src = TQ_CACHE / "bench" / "synth-llama-3g"
    write_checkpoint(src)
    src_bytes = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    out_root = pathlib.Path(tempfile.mkdtemp(prefix="tq-convert-bench-", dir=TQ_CACHE / "bench"))
    try:
        wall, peak, s = time_v([TQ_BIN, "convert", str(src), "-o", str(out_root / "synth"),
                                "--bits", "4", "--group-size", "64", "--json"])
        print(f"synthetic llama: {CFG['num_hidden_layers']} layers, {src_bytes / 1e9:.2f} GB bf16 "
              f"-> {s['bytes'] / 1e9:.3f} GB at {s['bpw']:.4f} bpw: wall {wall:.1f} s, "
              f"peak RSS {peak / 2**20:.0f} MiB", flush=True)
        if GGUF.exists():
            wall, peak, s = time_v([TQ_BIN, "convert", str(GGUF), "-o", str(out_root / "smol"),
                                    "--bits", "4", "--group-size", "64", "--json"])
            print(f"SmolLM2-135M (GGUF Q4_1 source) -> 4-bit g64, {s['bpw']:.4f} bpw: wall "
                  f"{wall:.1f} s, peak RSS {peak / 2**20:.0f} MiB")
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    if not keep:
        shutil.rmtree(src, ignore_errors=True)
        print(f"(removed the synthetic source; --keep keeps it in {src})")


if __name__ == "__main__":
    main()
