#!/usr/bin/env python3
"""Writes a `qwen35` GGUF of the Qwen3.5-0.8B-like geometry of bench/qwen35_speed.sh through the
`gguf` package (random Q4_0 matrices, f32 norms and DeltaNet vectors; SmolLM2's tokenizer padded
to the vocabulary), then asks the bundled native llama.cpp's llama-bench to run it: prefill of
`-p` tokens and decode of `-n` tokens at depth `-d`. Prints llama-bench's output or its error.
Usage: qwen35_gguf.py [--out F.gguf] [--depths 2048,8192] [--gen 16] [--threads 2]
"""
import argparse
import glob
import os
import subprocess
from pathlib import Path

import numpy as np

import gguf

CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
SMOL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
Q = gguf.GGMLQuantizationType
# As bench/qwen35_speed.sh: 24 layers (every 4th gated attention), hidden 1024, MLP 3584.
G = dict(hidden=1024, layers=24, ff=3584, heads=8, kv_heads=2, head_dim=256, rot=64,
         vocab=248320, hk=16, hv=16, dk=128, dv=128, conv=4, interval=4)


def q4_0(rng, rows, cols):
    """Random Q4_0 blocks (scale 0.01): speed does not depend on the values."""
    nb = cols // 32
    raw = rng.integers(0, 256, size=(rows, nb, 18), dtype=np.uint8)
    raw[:, :, 0:2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    return raw.reshape(rows, nb * 18)


def write(out: Path):
    g, rng = G, np.random.default_rng(0)
    r = gguf.GGUFReader(str(SMOL))
    w = gguf.GGUFWriter(str(out), "qwen35")
    for k in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.merges"):
        f = r.fields[k]
        t = f.types[0]
        w.add_key_value(k, f.contents(), t, f.types[-1] if t == gguf.GGUFValueType.ARRAY else None)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = list(r.fields["tokenizer.ggml.token_type"].contents())
    pad = g["vocab"] - len(toks)
    w.add_token_list(toks + [f"<unused_{i}>" for i in range(pad)])
    w.add_token_types(types + [gguf.TokenType.NORMAL] * pad)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_name("qwen35-0.8b-like-random")
    w.add_context_length(32768)
    w.add_embedding_length(g["hidden"])
    w.add_block_count(g["layers"])
    w.add_feed_forward_length(g["ff"])
    w.add_head_count(g["heads"])
    w.add_head_count_kv(g["kv_heads"])
    w.add_key_length(g["head_dim"])
    w.add_value_length(g["head_dim"])
    w.add_rope_dimension_count(g["rot"])
    w.add_rope_dimension_sections([11, 11, 10, 0])
    w.add_rope_freq_base(1e7)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_ssm_conv_kernel(g["conv"])
    w.add_ssm_state_size(g["dk"])
    w.add_ssm_group_count(g["hk"])
    w.add_ssm_time_step_rank(g["hv"])
    w.add_ssm_inner_size(g["hv"] * g["dv"])
    w.add_full_attention_interval(g["interval"])
    w.add_vocab_size(g["vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    d, kd, vd = g["hidden"], g["hk"] * g["dk"], g["hv"] * g["dv"]
    qd, kvd = g["heads"] * g["head_dim"], g["kv_heads"] * g["head_dim"]
    ones = lambda n: np.ones(n, np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", q4_0(rng, g["vocab"], d), raw_dtype=Q.Q4_0)
    w.add_tensor("output_norm.weight", ones(d))
    for l in range(g["layers"]):
        b = f"blk.{l}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(d))
        w.add_tensor(f"{b}.post_attention_norm.weight", ones(d))
        mats = [("ffn_gate", g["ff"], d), ("ffn_up", g["ff"], d), ("ffn_down", d, g["ff"])]
        if (l + 1) % g["interval"] == 0:  # gated attention: q carries its gate
            mats += [("attn_q", 2 * qd, d), ("attn_k", kvd, d), ("attn_v", kvd, d),
                     ("attn_output", d, qd)]
            w.add_tensor(f"{b}.attn_q_norm.weight", ones(g["head_dim"]))
            w.add_tensor(f"{b}.attn_k_norm.weight", ones(g["head_dim"]))
        else:  # Gated DeltaNet
            mats += [("attn_qkv", 2 * kd + vd, d), ("attn_gate", vd, d), ("ssm_beta", g["hv"], d),
                     ("ssm_alpha", g["hv"], d), ("ssm_out", d, vd)]
            conv = (rng.standard_normal((2 * kd + vd, g["conv"])) * 0.3).astype(np.float32)
            w.add_tensor(f"{b}.ssm_conv1d.weight", conv)
            w.add_tensor(f"{b}.ssm_dt.bias", np.zeros(g["hv"], np.float32))
            w.add_tensor(f"{b}.ssm_a", -np.ones(g["hv"], np.float32))
            w.add_tensor(f"{b}.ssm_norm.weight", ones(g["dv"]))
        for name, rows, cols in mats:
            w.add_tensor(f"{b}.{name}.weight", q4_0(rng, rows, cols), raw_dtype=Q.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(CACHE / "bench" / "qwen35" / "qwen35-0p8b-like-Q4_0.gguf"))
    ap.add_argument("--depths", default="2048,8192")
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rewrite", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    if a.rewrite or not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        write(out)
    bins = sorted(glob.glob(str(CACHE / "llama.cpp-native" / "*" / "bin" / "llama-bench")))
    if not bins:
        raise SystemExit("no native llama-bench under $TQ_CACHE/llama.cpp-native")
    cmd = [bins[-1], "-m", str(out), "-t", str(a.threads), "-p", str(a.prompt), "-n",
           str(a.gen), "-d", a.depths, "-r", "1", "-o", "md"]
    print(" ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    print(p.stdout)
    if p.returncode != 0:
        print("llama-bench failed (exit %d):" % p.returncode)
        print("\n".join(p.stderr.strip().splitlines()[-15:]))


if __name__ == "__main__":
    main()
