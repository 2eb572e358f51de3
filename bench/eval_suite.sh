#!/usr/bin/env bash
# tq eval measurements for bench/README.md: MMLU throughput on SmolLM2 4-bit g64 RTN, and the
# zero-shot suite source (f32 import of the bundled GGUF) vs 4-bit g64 RTN, paired, on a seeded
# subset. Usage: bench/eval_suite.sh [ITEMS_PER_TASK=100] [MMLU_ITEMS=500]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
n=${1:-100}
mmlu=${2:-500}
tq="$TQ_BUILD/tq"
work="$TQ_CACHE/bench/eval"
mkdir -p "$work"
[ -d "$work/f32" ] || "$tq" import "$TQ_SMOLLM2_GGUF" -o "$work/f32" --dtype f32 >/dev/null 2>&1
[ -d "$work/q4" ] || "$tq" convert "$work/f32" -o "$work/q4" --bits 4 --group-size 64 >/dev/null 2>&1
echo "== MMLU throughput, $mmlu seeded items, SmolLM2 4-bit g64 ($(nproc) threads)"
flock /tmp/tq-bench.lock "$tq" eval "$work/q4" --task mmlu --limit "$mmlu" --seed 1 --no-db 2>/dev/null
echo "== zero-shot suite, $n items per task, source vs 4-bit g64 RTN"
flock /tmp/tq-bench.lock "$tq" eval --base "$work/f32" "$work/q4" --task zeroshot --limit "$n" \
  --no-db 2>/dev/null
