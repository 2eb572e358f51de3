#!/usr/bin/env bash
# Wall time of tq sensitivity and a GPTQ conversion with 1 and 2 MPI ranks of one thread each
# (docs/MPI.md), on SmolLM2 (the f32 import that bench/refactor_check.sh makes), and the bytes
# of both runs compared. It holds /tmp/tq-bench.lock while it runs.
#   bench/mpi_scaling.sh [TQ_BIN]
# Prints one line per run (wall seconds) and the per-item costs the paper model uses.
set -euo pipefail
# The whole run holds the bench lock (no other benchmark overlaps it).
if [ -z "${TQ_BENCH_LOCKED:-}" ]; then
  TQ_BENCH_LOCKED=1 exec flock /tmp/tq-bench.lock "$0" "$@"
fi
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ=$(realpath "${1:-$TQ_BUILD/tq}")
work=$TQ_CACHE/bench/mpi-scaling
src=$TQ_CACHE/bench/refactor-check/smollm2-f32
mkdir -p "$work"
if [ ! -f "$src/config.json" ]; then
  "$TQ" import "$TQ_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf" -o "$src" --dtype f32 >/dev/null
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
mpi() { mpirun -np "$1" --bind-to none "${@:2}"; }
# Wall seconds of a command whose output goes to $out (stdout) and $err (stderr).
secs() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$out" 2>"$err"
  t1=$(date +%s.%N)
  awk "BEGIN { printf \"%.1f\", $t1 - $t0 }"
}

# Sensitivity: the 77 modules of layers 2 and 20-29, 2 x 128 tokens, specs 2/3/4 bits (8 scaled).
sens=(sensitivity "$src" --windows 2 --seq-len 128 --bits 2,3,4,8 --only layers.2 --threads 1)
out=/dev/null
for n in 1 2; do
  rm -f "$work/sens$n.json"
  err=$work/sens$n.err
  if [ "$n" = 1 ]; then
    s=$(secs "$TQ" "${sens[@]}" -o "$work/sens1.json")
  else
    s=$(secs mpi 2 "$TQ" "${sens[@]}" -o "$work/sens2.json")
  fi
  echo "sensitivity ranks=$n wall_s=$s"
done
python3 - "$work/sens1.json" "$work/sens2.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
strip = lambda d: [[s["kl"] for s in m["specs"]] for m in d["modules"]]
print("sensitivity tables equal (timings aside):", strip(a) == strip(b))
secs = [m["seconds"] for m in a["modules"]]
print(f"sensitivity per module: mean {sum(secs)/len(secs):.3f} s, max {max(secs):.3f} s, "
      f"{len(secs)} modules x 3 specs run")
PY

# GPTQ: 32 calibration rows of 256 tokens (two 16-row Hessian blocks), 4-bit g64.
gptq=(convert "$src" --bits 4 --gptq --calib-tokens 8192 --calib-seq-len 256 --no-timings --no-db)
for n in 1 2; do
  rm -rf "$work/gptq$n"
  err=$work/gptq$n.err
  if [ "$n" = 1 ]; then
    s=$(secs "$TQ" "${gptq[@]}" -o "$work/gptq1")
  else
    s=$(secs mpi 2 "$TQ" "${gptq[@]}" -o "$work/gptq2")
  fi
  echo "gptq ranks=$n wall_s=$s shards=$(cat "$work/gptq$n"/*.safetensors | sha256sum | cut -c1-16)"
done
# Rank 0's GPTQ solve (serial under any rank count): the per-module seconds it prints.
python3 - "$work/gptq1.err" <<'PY'
import re, sys
t = [float(m) for m in re.findall(r"· ([0-9.]+) s · ETA", open(sys.argv[1]).read())]
print(f"gptq solve: {sum(t):.2f} s over {len(t)} modules (rank 0, serial)")
PY
