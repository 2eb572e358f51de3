#!/usr/bin/env bash
# Bench (not a test): the rotation curve of issue 5 on SmolLM2-135M. Baseline = the dequantized
# source (GGUF Q4_1 imported to f32). For each arm, plain RTN vs rotation-folded RTN
# (`tq convert --rotate-weights`): PPL and mean KL(base || candidate) on the first WINDOWS x 512
# tokens of WikiText-2 test (mlx protocol). Arms: affine g64 at 2/3/4 bits, mxfp4, and the mixed
# profile "3-bit MLP, 4-bit attention and embeddings" (a recipe file).
# Rotations: "plain" (none), "rotated" (R1 + R2 hadamard: untie, gamma-fold, R1, R2), "r2-only"
# (--r1 none: R2 alone, no untie or gamma-fold).
# Usage: bench/rotation_curve.sh [WINDOWS] [SEED]   env: TQ_BIN, ROTS ("plain rotated r2-only"),
#        BASE_LOGITS (reuse a `tq kl --save-base` file of the same source and windows)
# Prints a markdown table on stdout; the JSON of every run goes to $TQ_CACHE/bench/rotation/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
TQ_BIN="${TQ_BIN:-$TQ_BUILD/tq}"
WINDOWS="${1:-64}"
SEED="${2:-0}"
WIKI="$TQ_ROOT/data/wikitext-2-raw/wiki.test.raw"
WORK="$TQ_CACHE/bench/rotation"
BASE="$TQ_CACHE/bench/smollm2-135m-f32"
mkdir -p "$WORK"
ROTS="${ROTS:-plain rotated r2-only}"
if [[ -z "${BASE_LOGITS:-}" ]]; then
  BASE_LOGITS="$WORK/base_logits_${WINDOWS}.bin"  # SmolLM2: ~100 MB per window
  rm -f "$BASE_LOGITS"
  trap 'rm -f "$BASE_LOGITS"' EXIT
fi
if [[ ! -f "$BASE/model.safetensors" ]]; then
  mkdir -p "$(dirname "$BASE")"
  "$TQ_BIN" import "$TQ_SMOLLM2_GGUF" -o "$BASE" --dtype f32 >/dev/null
fi
cat >"$WORK/mixed_3mlp_4attn.json" <<'JSON'
{"mode": "affine", "bits": 4, "group_size": 64,
 "rules": [{"match": "role:mlp_gate", "bits": 3},
           {"match": "role:mlp_up", "bits": 3},
           {"match": "role:mlp_down", "bits": 3}]}
JSON

ARMS=("affine 2-bit g64|--bits 2 --group-size 64"
      "affine 3-bit g64|--bits 3 --group-size 64"
      "affine 4-bit g64|--bits 4 --group-size 64"
      "mxfp4|--mode mxfp4"
      "3-bit MLP, 4-bit attn+embed|--recipe $WORK/mixed_3mlp_4attn.json")

echo "SmolLM2-135M-Instruct, WikiText-2 test first ${WINDOWS}x512 tokens, baseline = dequantized source (Q4_1 -> f32), RTN, seed ${SEED}"
echo
echo "| arm | rotation | bpw | PPL | mean KL | top-1 agreement |"
echo "|---|---|---|---|---|---|"
base_ppl=""
for arm in "${ARMS[@]}"; do
  name="${arm%%|*}"
  flags="${arm#*|}"
  for rot in $ROTS; do
    tag="$(echo "$name-$rot" | tr -c 'a-zA-Z0-9-' '_')"
    out="$WORK/$tag"
    extra=()
    [[ "$rot" == rotated ]] && extra=(--rotate-weights --seed "$SEED")
    [[ "$rot" == r2-only ]] && extra=(--rotate-weights --r1 none --seed "$SEED")
    # shellcheck disable=SC2086
    "$TQ_BIN" convert "$BASE" -o "$out" $flags "${extra[@]}" --dtype bf16 --force --json \
      >"$out.convert.json" 2>/dev/null
    if [[ -f "$BASE_LOGITS" ]]; then
      "$TQ_BIN" kl --base-logits "$BASE_LOGITS" "$out" --text "$WIKI" --windows "$WINDOWS" \
        --json --no-db >"$out.kl.json" 2>/dev/null
    else  # the first arm also saves the base rows (f32 x vocab per token) for the others
      "$TQ_BIN" kl "$BASE" "$out" --text "$WIKI" --windows "$WINDOWS" --save-base "$BASE_LOGITS" \
        --json --no-db >"$out.kl.json" 2>/dev/null
    fi
    python3 - "$out.convert.json" "$out.kl.json" "$name" "$rot" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); k = json.load(open(sys.argv[2]))
print(f"| {sys.argv[3]} | {sys.argv[4]} | {c['bpw']:.3f} | {k['ppl_candidate']:.3f} ± "
      f"{k['ppl_candidate_se']:.3f} | {k['mean_kl']:.4f} | {k['top1_agreement']:.4f} |")
PY
    base_ppl="$(python3 -c "import json;k=json.load(open('$out.kl.json'));print(f\"{k['ppl_base']:.3f} ± {k['ppl_base_se']:.3f}\")")"
  done
done
echo
echo "baseline (dequantized source, f32) PPL: $base_ppl"
