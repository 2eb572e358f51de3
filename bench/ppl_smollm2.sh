#!/usr/bin/env bash
# Bench (not a test): `tq ppl` on SmolLM2-135M (imported to f32) over the first 64 windows x 512
# tokens of WikiText-2 test; prints the result, wall time, tok/s and peak RSS.
# Usage: bench/ppl_smollm2.sh [WINDOWS]   (env TQ_BIN overrides the binary)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
WINDOWS="${1:-64}"
WIKI="$TQ_ROOT/data/wikitext-2-raw/wiki.test.raw"
MODEL="$TQ_CACHE/bench/smollm2-135m-f32"
if [[ ! -f "$MODEL/model.safetensors" ]]; then
  mkdir -p "$(dirname "$MODEL")"
  "$TQ_BIN" import "$TQ_SMOLLM2_GGUF" -o "$MODEL" --dtype f32 >/dev/null
fi
echo "model: $MODEL ($(du -sb "$MODEL/model.safetensors" | cut -f1) bytes of f32 weights)"
/usr/bin/time -v "$TQ_BIN" ppl "$MODEL" --text "$WIKI" --windows "$WINDOWS" --json --no-db \
  2> >(grep -E "Elapsed \(wall|Maximum resident|Percent of CPU|^ppl: $WINDOWS/" >&2)
