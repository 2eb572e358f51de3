#!/usr/bin/env bash
# Numbers a forward-pass refactor must not move, printed for one tq binary: run it with the
# binary from before and after a change and diff the outputs.
#   bench/refactor_check.sh [TQ_BIN] > after.txt
# Prints: SHA-256 of a GPTQ conversion's shards, of a sensitivity table (timings removed),
# and PPL of the reference and fast runtimes on SmolLM2 (f32 import of the bundled GGUF).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ=${1:-$TQ_BUILD/tq}
work=$TQ_CACHE/bench/refactor-check
mkdir -p "$work"
src=$work/smollm2-f32
if [ ! -f "$src/config.json" ]; then
  "$TQ" import "$TQ_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf" -o "$src" --dtype f32 >/dev/null
fi
text=$TQ_ROOT/data/wikitext-2-raw/wiki.test.raw

rm -rf "$work/gptq"
"$TQ" convert "$src" -o "$work/gptq" --bits 4 --gptq --calib-tokens 4096 --calib-seq-len 256 \
  --no-timings --no-db 2>/dev/null >/dev/null
echo "gptq shards: $(cat "$work"/gptq/*.safetensors | sha256sum | cut -c1-16)"

rm -f "$work/sens.json"
"$TQ" sensitivity "$src" --windows 2 --seq-len 128 --bits 2,3,4,8 -o "$work/sens.json" \
  >/dev/null 2>&1
python3 - "$work/sens.json" <<'EOF'
import hashlib, json, sys
d = json.load(open(sys.argv[1]))
def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if "second" not in k and "time" not in k}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o
print("sensitivity:", hashlib.sha256(json.dumps(strip(d), sort_keys=True).encode()).hexdigest()[:16])
EOF

for rt in --reference ""; do
  "$TQ" ppl "$src" --text "$text" --windows 8 --no-db --json $rt |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("ppl '"${rt:-fast}"':", d["ppl"])'
done
