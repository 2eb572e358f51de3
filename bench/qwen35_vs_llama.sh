#!/usr/bin/env bash
# Decode of the qwen3_5 0.8B-like 4-bit checkpoint (bench/qwen35_speed.sh makes it) against a
# seeded random llama checkpoint of the same hidden size, MLP, vocabulary and layer count whose
# attention (32 query / 4 KV heads of 128) makes its 4-bit bytes per token match within ~1%:
# `tq bench` decode tok/s after prompts of each length, the two models alternated. The KV dim
# of a llama layer (4 x 128) equals that of a qwen3_5 attention layer (2 x 256), so the context
# costs both the same per attention layer; qwen3_5 has 6 of them, llama 24.
# Run under flock /tmp/tq-bench.lock.   bench/qwen35_vs_llama.sh [LENGTHS] [GEN] [ROUNDS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ=${TQ:-$TQ_BUILD/tq}
lengths=${1:-128,2048,8192}
gen=${2:-16}
rounds=${3:-1}
work=$TQ_CACHE/bench/qwen35
qwen=$work/qwen35-0p8b-like-4bit
src=$work/llama-0p8b-bytes-bf16
q4=$work/llama-0p8b-bytes-4bit
py=${PYTHON:-$HOME/.cache/turboquant/venv/bin/python}
[ -f "$qwen/config.json" ] || { echo "run bench/qwen35_speed.sh first (makes $qwen)" >&2; exit 1; }
if [ ! -f "$src/config.json" ]; then
  "$py" - "$src" "$work/qwen35-0p8b-like-bf16" <<'PY'
import json, pathlib, shutil, sys
import mlx.core as mx
import numpy as np
d = pathlib.Path(sys.argv[1]); d.mkdir(parents=True, exist_ok=True)
c = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=1024,
         num_hidden_layers=24, intermediate_size=3584, num_attention_heads=32,
         num_key_value_heads=4, head_dim=128, vocab_size=248320, rms_norm_eps=1e-6,
         rope_theta=1e7, max_position_embeddings=32768, tie_word_embeddings=True,
         hidden_act="silu", attention_bias=False, mlp_bias=False, torch_dtype="bfloat16")
rng = np.random.default_rng(0)
h, i, qd, kvd = 1024, 3584, 32 * 128, 4 * 128
def rand(r, k):
    return mx.array((rng.standard_normal((r, k), dtype=np.float32) * k ** -0.5)).astype(mx.bfloat16)
w = {"model.embed_tokens.weight": rand(c["vocab_size"], h), "model.norm.weight": mx.ones((h,), mx.bfloat16)}
for l in range(c["num_hidden_layers"]):
    p = f"model.layers.{l}"
    for name, r, k in [("self_attn.q_proj", qd, h), ("self_attn.k_proj", kvd, h),
                       ("self_attn.v_proj", kvd, h), ("self_attn.o_proj", h, qd),
                       ("mlp.gate_proj", i, h), ("mlp.up_proj", i, h), ("mlp.down_proj", h, i)]:
        w[f"{p}.{name}.weight"] = rand(r, k)
    w[f"{p}.input_layernorm.weight"] = mx.ones((h,), mx.bfloat16)
    w[f"{p}.post_attention_layernorm.weight"] = mx.ones((h,), mx.bfloat16)
mx.save_safetensors(str(d / "model.safetensors"), w, metadata={"format": "pt"})
(d / "config.json").write_text(json.dumps(c, indent=2))
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(pathlib.Path(sys.argv[2]) / f, d / f)
PY
fi
[ -f "$q4/config.json" ] || "$TQ" convert "$src" -o "$q4" --bits 4 --group-size 64 --no-db >/dev/null
for m in "$qwen" "$q4"; do echo "$(basename "$m"):"; "$TQ" inspect "$m" | grep -E "bits/weight|size "; done
for r in $(seq "$rounds"); do
  order=("$qwen" "$q4")
  [ $((r % 2)) -eq 0 ] && order=("$q4" "$qwen")  # alternate which model goes first
  for m in "${order[@]}"; do
    echo "round $r $(basename "$m") (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    "$TQ" bench "$m" --prompt-lengths "$lengths" --gen "$gen" --repeat 1 --no-db
  done
done
