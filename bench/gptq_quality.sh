#!/usr/bin/env bash
# Bench (not a test): RTN vs GPTQ (vs rotated+GPTQ when `tq convert` has --rotate; vs stock
# mlx_lm.gptq with MLX_GPTQ=1) on SmolLM2-135M. Baseline = the dequantized source (imported to
# f32); calibration = SOTU, CALIB_TOKENS (default 128x512); evaluation = WikiText-2 test, the
# first WINDOWS (64) windows of 512 tokens: PPL and mean KL vs the baseline, conversion wall
# time and peak RSS. Prints one table row per run; logs and outputs under $OUT.
# Usage: bench/gptq_quality.sh            env: CONFIGS="4:64 3:64 2:32" WINDOWS CALIB_TOKENS
#        MLX_GPTQ=1 (side by side), E6=1, OUT (default $TQ_CACHE/bench/gptq), TQ_BIN,
#        BASE_LOGITS (reuse a `tq kl --save-base` file of the same source and windows),
#        SKIP="gptq-b4-g64 …" (arms already measured), METHODS (default "rtn gptq rot-gptq")
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
WINDOWS="${WINDOWS:-64}"
CALIB_TOKENS="${CALIB_TOKENS:-65536}"
CONFIGS="${CONFIGS:-4:64 3:64 2:32}"
OUT="${OUT:-$TQ_CACHE/bench/gptq}"
WIKI="$TQ_ROOT/data/wikitext-2-raw/wiki.test.raw"
SRC="$TQ_CACHE/bench/smollm2-135m-f32"
PY="${TQ_PYTHON:-$TQ_CACHE/venv/bin/python}"
mkdir -p "$OUT"
if [[ ! -f "$SRC/model.safetensors" ]]; then
  mkdir -p "$(dirname "$SRC")"
  "$TQ_BIN" import "$TQ_SMOLLM2_GGUF" -o "$SRC" --dtype f32 >/dev/null
fi
METHODS="${METHODS:-rtn gptq rot-gptq}"
# mlx_lm.gptq keeps the embedding (tied head) at 6-bit g64: "gptq-e6" (E6=1) is ours with that
# layout, for a comparison at equal bytes.
[[ -n "${MLX_GPTQ:-}" && -n "${E6:-}" ]] && METHODS="$METHODS gptq-e6"
cat >"$OUT/embed6.json" <<'JSON'
{"rules": [{"match": "role:embed", "bits": 6, "group_size": 64}]}
JSON

if [[ -z "${BASE_LOGITS:-}" ]]; then  # ~100 MB per window, made by the first row
  BASE_LOGITS="$OUT/base_logits_${WINDOWS}.bin"
  rm -f "$BASE_LOGITS"
  trap 'rm -f "$BASE_LOGITS"' EXIT
fi
row() {  # name bits group dst wall rss
  if [[ -f "$BASE_LOGITS" ]]; then
    "$TQ_BIN" kl --base-logits "$BASE_LOGITS" "$4" --text "$WIKI" --windows "$WINDOWS" --json \
      --no-db >"$4.kl.json"
  else
    "$TQ_BIN" kl "$SRC" "$4" --text "$WIKI" --windows "$WINDOWS" --save-base "$BASE_LOGITS" \
      --json --no-db >"$4.kl.json"
  fi
  # bpw by mlx-lm's definition, as `tq inspect` computes it from the headers.
  "$TQ_BIN" inspect "$4" --json >"$4.inspect.json"
  "$PY" - "$1" "$2" "$3" "$4" "$5" "$6" <<'PYEOF'
import json, sys
name, b, g, d, wall, rss = sys.argv[1:7]
k = json.load(open(d + ".kl.json"))
bpw = json.load(open(d + ".inspect.json"))["bpw"]
print(f"| {name:9} | {b}-bit g{g:3} | {bpw:.3f} | {k['ppl_candidate']:8.3f} ± "
      f"{k['ppl_candidate_se']:.3f} | {k['mean_kl']:.5f} | {float(wall):7.1f} s | "
      f"{int(rss) / 2**30:5.2f} GiB |", flush=True)
PYEOF
}

echo "calibration: SOTU, $CALIB_TOKENS tokens in rows of 512; evaluation: WikiText-2 test, first $WINDOWS x 512"
echo
echo "| method    | spec        | bpw   | PPL      | mean KL | convert   | peak RSS  |"
echo "|---|---|---|---|---|---|---|"
for cfg in $CONFIGS; do
  B="${cfg%:*}"
  G="${cfg#*:}"
  mlx_ok=""
  [[ -n "${MLX_GPTQ:-}" && " 2 4 8 " == *" $B "* ]] && mlx_ok=1
  for m in $METHODS; do
    [[ $m == *-e6 && -z "$mlx_ok" ]] && continue
    dst="$OUT/$m-b$B-g$G"
    [[ " ${SKIP:-} " == *" $(basename "$dst") "* ]] && continue
    flags=()
    [[ $m == *gptq* ]] && flags+=(--gptq --calib-tokens "$CALIB_TOKENS" --calib-save "$OUT/calib.i32")
    [[ $m == rot-* ]] && flags+=(--rotate-weights)
    [[ $m == *-e6 ]] && flags+=(--recipe "$OUT/embed6.json")
    /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$TQ_BIN" convert "$SRC" -o "$dst" --bits "$B" \
      --group-size "$G" --dtype bf16 --force "${flags[@]}" 2>"$dst.log"
    read -r wall rss_kb <"$OUT/time.txt"
    row "$m" "$B" "$G" "$dst" "$wall" "$((rss_kb * 1024))"
  done
  if [[ -n "${MLX_GPTQ:-}" && -z "$mlx_ok" ]]; then
    echo "| mlx-gptq  | $B-bit g$G | unsupported (mlx_lm.gptq quantizes only 2, 4 or 8 bits) |||||"
  elif [[ -n "$mlx_ok" && -f "$OUT/calib.i32" ]]; then
    dst="$OUT/mlx-gptq-b$B-g$G"
    rm -rf "$dst"
    if ! LD_PRELOAD="$(ls /usr/lib/*-linux-gnu/libopenblas.so.0 | head -1)" \
      /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$PY" "$TQ_ROOT/bench/mlx_gptq_side.py" \
      "$SRC" "$dst" "$B" "$G" "$OUT/calib.i32" 512 >"$dst.log" 2>&1; then
      echo "| mlx-gptq  | $B-bit g$G | failed: $(grep -m1 -E 'Error|error' "$dst.log" | cut -c1-80) |||||"
      continue
    fi
    read -r wall rss_kb <"$OUT/time.txt"
    row "mlx-gptq" "$B" "$G" "$dst" "$wall" "$((rss_kb * 1024))"
  fi
done
