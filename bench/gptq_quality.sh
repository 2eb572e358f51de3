#!/usr/bin/env bash
# Bench (not a test): RTN vs GPTQ (vs rotated+GPTQ when `tq convert` has --rotate; vs stock
# mlx_lm.gptq with MLX_GPTQ=1) on SmolLM2-135M. Baseline = the dequantized source (imported to
# f32); calibration = SOTU, CALIB_TOKENS (default 128x512); evaluation = WikiText-2 test, the
# first WINDOWS (64) windows of 512 tokens: PPL and mean KL vs the baseline, conversion wall
# time and peak RSS. Prints one table row per run; logs and outputs under $OUT.
# Usage: bench/gptq_quality.sh            env: CONFIGS="4:64 3:64 2:32" WINDOWS CALIB_TOKENS
#        MLX_GPTQ=1 (side by side), OUT (default $TQ_CACHE/bench/gptq), TQ_BIN
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
WINDOWS="${WINDOWS:-64}"
CALIB_TOKENS="${CALIB_TOKENS:-65536}"
CONFIGS="${CONFIGS:-4:64 3:64 2:32}"
OUT="${OUT:-$TQ_CACHE/bench/gptq}"
WIKI="$TQ_ROOT/../shared/data/wikitext-2-raw/wiki.test.raw"
SRC="$TQ_CACHE/bench/smollm2-135m-f32"
PY="${TQ_PYTHON:-$TQ_CACHE/venv/bin/python}"
mkdir -p "$OUT"
if [[ ! -f "$SRC/model.safetensors" ]]; then
  mkdir -p "$(dirname "$SRC")"
  "$TQ_BIN" import "$TQ_SMOLLM2_GGUF" -o "$SRC" --dtype f32 >/dev/null
fi
METHODS="rtn gptq"
if "$TQ_BIN" convert --help 2>&1 | grep -q -- "--rotate"; then METHODS="$METHODS rot-gptq"; fi

row() {  # name bits group dst wall rss
  "$TQ_BIN" kl "$SRC" "$4" --text "$WIKI" --windows "$WINDOWS" --json --no-db >"$4.kl.json"
  "$PY" - "$1" "$2" "$3" "$4.kl.json" "$5" "$6" <<'PYEOF'
import json, sys
name, b, g, f, wall, rss = sys.argv[1:7]
k = json.load(open(f))
print(f"| {name:9} | {b}-bit g{g:3} | {k['ppl_candidate']:8.3f} | {k['mean_kl']:.5f} | "
      f"{float(wall):7.1f} s | {int(rss) / 1048576:5.2f} GiB |")
PYEOF
}

echo "| method    | spec        | PPL      | mean KL | convert   | peak RSS  |"
echo "|---|---|---|---|---|---|"
for cfg in $CONFIGS; do
  B="${cfg%:*}"
  G="${cfg#*:}"
  for m in $METHODS; do
    dst="$OUT/$m-b$B-g$G"
    flags=()
    [[ $m == *gptq ]] && flags+=(--gptq --calib-tokens "$CALIB_TOKENS" --calib-save "$OUT/calib.i32")
    [[ $m == rot-* ]] && flags+=(--rotate)
    /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$TQ_BIN" convert "$SRC" -o "$dst" --bits "$B" \
      --group-size "$G" --force "${flags[@]}" 2>"$dst.log"
    read -r wall rss_kb <"$OUT/time.txt"
    row "$m" "$B" "$G" "$dst" "$wall" "$((rss_kb * 1024))"
  done
  if [[ -n "${MLX_GPTQ:-}" && -f "$OUT/calib.i32" ]]; then
    dst="$OUT/mlx-gptq-b$B-g$G"
    rm -rf "$dst"
    LD_PRELOAD="$(ls /usr/lib/*-linux-gnu/libopenblas.so.0 | head -1)" \
      /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$PY" "$TQ_ROOT/bench/mlx_gptq_side.py" \
      "$SRC" "$dst" "$B" "$G" "$OUT/calib.i32" 512 >"$dst.log" 2>&1
    read -r wall rss_kb <"$OUT/time.txt"
    row "mlx-gptq" "$B" "$G" "$dst" "$wall" "$((rss_kb * 1024))"
  fi
done
