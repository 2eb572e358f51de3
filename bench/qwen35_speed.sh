#!/usr/bin/env bash
# qwen3_5 speed on a seeded random checkpoint of Qwen3.5-0.8B-like geometry (no real weights
# here): converted to affine 4-bit g64, then `tq bench` with the chunked Gated DeltaNet prefill
# (TQ_DELTA_CHUNK=32, the default) and token by token (TQ_DELTA_CHUNK=0), and the kernel alone
# (tq_kernel_bench BM_GatedDelta). Run under flock /tmp/tq-bench.lock on a quiet machine.
# The two settings alternate, ROUNDS times each.
#   bench/qwen35_speed.sh [LENGTHS] [GEN] [ROUNDS]   (default 128,2048, 32 and 2)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ=${TQ:-$TQ_BUILD/tq}
lengths=${1:-128,2048}
gen=${2:-32}
rounds=${3:-2}
work=$TQ_CACHE/bench/qwen35
src=$work/qwen35-0p8b-like-bf16
q4=$work/qwen35-0p8b-like-4bit
py=${PYTHON:-$HOME/.cache/turboquant/venv/bin/python}
if [ ! -f "$src/config.json" ]; then
  "$py" - "$src" <<'PY'
import pathlib, sys
sys.path.insert(0, str(pathlib.Path("tests/oracle").resolve()))
from qwen35_fixture import write_geometry
# Assumed Qwen3.5-0.8B-like: 24 layers (18 Gated DeltaNet + 6 gated attention), hidden 1024,
# 16 key / 16 value heads of 128, 8 query / 2 KV heads of 256 (rotary 64), MLP 3584.
geo = dict(layout="hf", nested=True, text=dict(
    hidden_size=1024, num_hidden_layers=24, intermediate_size=3584, num_attention_heads=8,
    num_key_value_heads=2, head_dim=256, vocab_size=248320, linear_num_key_heads=16,
    linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, full_attention_interval=4, tie_word_embeddings=True,
    rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                        "partial_rotary_factor": 0.25}))
write_geometry(pathlib.Path(sys.argv[1]), geo, seed=0, dtype="bfloat16")
PY
fi
[ -f "$q4/config.json" ] || "$TQ" convert "$src" -o "$q4" --bits 4 --group-size 64 --no-db >/dev/null
"$TQ" inspect "$q4" | grep -E "bits/weight|size "
for r in $(seq "$rounds"); do
  for chunk in 32 0; do
    echo "round $r TQ_DELTA_CHUNK=$chunk (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    TQ_DELTA_CHUNK=$chunk "$TQ" bench "$q4" --prompt-lengths "$lengths" --gen "$gen" --repeat 1 \
      --no-db
  done
done
"$TQ_BUILD/tq_kernel_bench" --benchmark_filter=GatedDelta --benchmark_min_time=0.5
