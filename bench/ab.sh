#!/bin/bash
# A/B of tq builds or settings on one model: runs `tq bench` once per configuration, in turn,
# ROUNDS times (alternated so that drift in machine load hits every configuration), then prints
# the median prefill and decode tok/s of each with the per-round values.
#   bench/ab.sh MODEL PROMPT_LEN ROUNDS CONFIG...
# A CONFIG is words: BIN=path (a tq binary; default build/tq), ARGS=--flag=value (extra tq bench
# arguments, repeatable), anything else is put in the environment (TQ_AMX=0). GEN=n in the
# script's own environment sets --gen (default 64). Example, the committed build against a saved
# one:   bench/ab.sh MODEL 128 5 "BIN=/tmp/tq_before" "X=1"
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,9p "$0"; exit 2; }
REPO=$(cd "$(dirname "$0")/.." && pwd)
M=$1 L=$2 R=$3
shift 3
declare -a P D
for ((r = 0; r < R; r++)); do
  i=0
  for cfg in "$@"; do
    bin=$REPO/build/tq args=() envs=()
    for w in $cfg; do
      case $w in
        BIN=*) bin=${w#BIN=} ;;
        ARGS=*) args+=("${w#ARGS=}") ;;
        *) envs+=("$w") ;;
      esac
    done
    out=$(env "${envs[@]}" "$bin" bench "$M" --prompt-lengths "$L" --gen "${GEN:-64}" --repeat 1 \
      --no-db "${args[@]}" 2>/dev/null | awk -v l="$L" '$1 == l { print $3, $6 }')
    P[i]="${P[i]:-} ${out% *}" D[i]="${D[i]:-} ${out#* }"
    i=$((i + 1))
  done
done
med() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
i=0
for cfg in "$@"; do
  echo "$cfg: prefill $(med "${P[i]}") [${P[i]} ] decode $(med "${D[i]}") [${D[i]} ]"
  i=$((i + 1))
done
