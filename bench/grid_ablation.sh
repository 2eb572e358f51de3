#!/usr/bin/env bash
# Bench (not a test): which grid lever gives what (docs/GPTQ.md, "Grids"). SmolLM2-135M, source
# = the GGUF imported to f32; calibration = SOTU (GPTQ's default 128x512 rows); evaluation = mean
# KL against the source on TEXT (default WikiText-2 test), the first WINDOWS (64) x 512 tokens.
# One row per arm: bpw (mlx-lm's definition), bytes, PPL, mean KL, convert wall time, peak RSS.
# Usage: bench/grid_ablation.sh   env: ARMS (names below), WINDOWS, TEXT, OUT, TQ_BIN,
#        BASE_LOGITS (reuse a `tq kl --save-base` file of the same source, text and windows)
# Arm names: {rtn,gptq,rot-gptq}-b{3,4}-{minmax,search,search-refit,minmax-refit}
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
WINDOWS="${WINDOWS:-64}"
TEXT="${TEXT:-$TQ_ROOT/data/wikitext-2-raw/wiki.test.raw}"
OUT="${OUT:-$TQ_CACHE/bench/grid}"
SRC="$TQ_CACHE/bench/smollm2-135m-f32"
PY="${TQ_PYTHON:-$TQ_CACHE/venv/bin/python}"
ARMS="${ARMS:-rtn-b4-minmax rtn-b4-search rtn-b3-minmax rtn-b3-search}"
mkdir -p "$OUT"
if [[ ! -f "$SRC/model.safetensors" ]]; then
  mkdir -p "$(dirname "$SRC")"
  "$TQ_BIN" import "$TQ_SMOLLM2_GGUF" -o "$SRC" --dtype f32 >/dev/null
fi
if [[ -z "${BASE_LOGITS:-}" ]]; then
  BASE_LOGITS="$OUT/base_logits_${WINDOWS}.bin"
  rm -f "$BASE_LOGITS"
  trap 'rm -f "$BASE_LOGITS"' EXIT
fi
export SRC TEXT WINDOWS BASE_LOGITS TQ_BIN PY
echo "| arm | bpw | bytes | PPL | mean KL | convert s | peak RSS GiB |"
echo "|---|---|---|---|---|---|---|"
for arm in $ARMS; do
  b="$(sed -E 's/.*-b([0-9]+)-.*/\1/' <<<"$arm")"  # rtn-b4-search -> 4
  flags=(--bits "$b" --group-size 64 --dtype bf16)
  [[ $arm == *gptq* ]] && flags+=(--gptq)
  [[ $arm == rot-* ]] && flags+=(--rotate-weights)
  [[ $arm == *-search* ]] && flags+=(--grid search)
  [[ $arm == *-minmax* ]] && flags+=(--grid minmax)
  [[ $arm == *-refit ]] && flags+=(--grid-refit on)
  [[ $arm == *gptq* && $arm != *-refit ]] && flags+=(--grid-refit off)
  "$(dirname "${BASH_SOURCE[0]}")/arm_row.sh" "$arm" "$OUT/$arm" -- "${flags[@]}"
done
