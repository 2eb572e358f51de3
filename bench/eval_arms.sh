#!/usr/bin/env bash
# Task accuracy of the quantized arms against their source (issue 29's table): SmolLM2-135M f32
# (the bundled GGUF imported) against 4-bit g64 RTN, `--preset best --bits 4` (rotated + GPTQ)
# and `--preset best --target-bpw 3.5` (allocated), each paired with the source on the same
# seeded items: the zero-shot suite (ITEMS per task) and MMLU (MMLU_ITEMS); 0 = every item.
# One `tq eval --json --reuse` per arm and task into $OUT/ARM.TASK.json (kept: a rerun skips
# it), all recording into $OUT/results.sqlite, so the source is scored once per task, not once
# per arm, and an interrupted run resumes task by task. The table is printed at the end.
# Usage: bench/eval_arms.sh [ITEMS=300] [MMLU_ITEMS=2000]
#   env: ARMS ("rtn4 best4 best35"), TASKS (the zero-shot suite and mmlu; also gsm8k, raw
#        8-shot, and gsm8k_chat, zero-shot through the chat template), GSM_ITEMS (250),
#        OUT ($TQ_CACHE/bench/eval-arms), SEED (0)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
items=${1:-300}
mmlu=${2:-2000}
ARMS="${ARMS:-rtn4 best4 best35}"
TASKS="${TASKS:-arc_easy arc_challenge boolq hellaswag openbookqa piqa winogrande lambada mmlu}"
OUT="${OUT:-$TQ_CACHE/bench/eval-arms}"
SEED="${SEED:-0}"
GSM_ITEMS="${GSM_ITEMS:-250}"
tq="$TQ_BUILD/tq"
src="$TQ_CACHE/bench/smollm2-135m-f32"
mkdir -p "$OUT"
[[ -f "$src/model.safetensors" ]] || "$tq" import "$TQ_SMOLLM2_GGUF" -o "$src" --dtype f32 >/dev/null
arm_dir() {  # the arm's artifact, converted once
  local d="$OUT/$1"
  if [[ ! -f "$d/config.json" ]]; then
    case "$1" in
      rtn4) "$tq" convert "$src" -o "$d" --bits 4 --group-size 64 --no-db ;;
      best4) "$tq" convert "$src" -o "$d" --preset best --bits 4 --no-db ;;
      best35) "$tq" convert "$src" -o "$d" --preset best --target-bpw 3.5 --no-db ;;
      *) echo "unknown arm $1" >&2; exit 2 ;;
    esac >"$d.convert.log" 2>&1
  fi
  echo "$d"
}
for arm in $ARMS; do
  d=$(arm_dir "$arm")
  for task in $TASKS; do
    f="$OUT/$arm.$task.json"
    [[ -s "$f" ]] && continue
    n=$items
    args=(--task "$task")
    case $task in
      mmlu) n=$mmlu ;;
      gsm8k) n=$GSM_ITEMS ;;
      gsm8k_chat) n=$GSM_ITEMS args=(--task gsm8k --chat) ;;
    esac
    echo "== $arm: $task, $n items (0: all), paired with the source" >&2
    /usr/bin/time -f "%e s" -o "$f.time" "$tq" eval --base "$src" "$d" "${args[@]}" \
      --limit "$n" --seed "$SEED" --json --reuse --db "$OUT/results.sqlite" >"$f.tmp" 2>"$f.log"
    mv "$f.tmp" "$f"
  done
done
"$TQ_PY" "$(dirname "${BASH_SOURCE[0]}")/eval_arms_table.py" "$OUT" $ARMS
