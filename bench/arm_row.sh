#!/usr/bin/env bash
# Bench helper (not a test): converts one arm and prints its table row.
# Usage: bench/arm_row.sh NAME DST -- TQ_CONVERT_FLAGS...   (converts $SRC into DST)
#        bench/arm_row.sh NAME DST --peer SECONDS RSS_KB    (DST made by a peer; row only)
# env: SRC, TEXT, WINDOWS, BASE_LOGITS (made on first use), TQ_BIN, PY, DB (results database:
# the kl row is recorded there when set, else --no-db).
# Row: | NAME | bpw | bytes | PPL | mean KL | convert s | peak RSS GiB |
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
PY="${TQ_PYTHON:-$TQ_CACHE/venv/bin/python}"
SRC="${SRC:-$TQ_CACHE/bench/smollm2-135m-f32}"
TEXT="${TEXT:-$TQ_ROOT/data/wikitext-2-raw/wiki.test.raw}"
WINDOWS="${WINDOWS:-64}"
name="$1" d="$2"
shift 2
db=(--no-db)
[[ -n "${DB:-}" ]] && db=(--db "$DB")
if [[ "${1:-}" == --peer ]]; then
  wall="$2" rss_kb="$3"
else
  [[ "${1:-}" == -- ]] && shift
  if ! /usr/bin/time -f "%e %M" -o "$d.time" "$TQ_BIN" convert "$SRC" -o "$d" --force "${db[@]}" \
    "$@" 2>"$d.log"; then
    echo "| $name | failed: $(tail -1 "$d.log" | cut -c1-100) |||||"
    exit 0
  fi
  read -r wall rss_kb <"$d.time"
fi
if [[ -f "$BASE_LOGITS" ]]; then
  kl=(--base-logits "$BASE_LOGITS" "$d")
else
  kl=("$SRC" "$d" --save-base "$BASE_LOGITS")
fi
"$TQ_BIN" kl "${kl[@]}" --text "$TEXT" --windows "$WINDOWS" --json "${db[@]}" >"$d.kl.json" \
  2>"$d.kl.log" || { echo "| $name | kl failed: $(tail -1 "$d.kl.log" | cut -c1-100) |||||"; exit 0; }
"$TQ_BIN" inspect "$d" --json >"$d.inspect.json"
"$PY" - "$name" "$d" "$wall" "$rss_kb" <<'PYEOF'
import json, sys
name, d, wall, rss = sys.argv[1:5]
k = json.load(open(d + ".kl.json"))
i = json.load(open(d + ".inspect.json"))
print(f"| {name} | {i['bpw']:.3f} | {i['bytes']} | {k['ppl_candidate']:.3f} ± "
      f"{k['ppl_candidate_se']:.3f} | {k['mean_kl']:.4f} | {float(wall):.1f} | "
      f"{int(rss) / 2**20:.2f} |", flush=True)
PYEOF
