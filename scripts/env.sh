# Sourced by the scripts: where things live. Override TQ_CACHE to move the cache.
TQ_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TQ_CACHE="${TQ_CACHE:-$HOME/.cache/turboquant}"
TQ_VENV="$TQ_CACHE/venv"
TQ_PY="$TQ_VENV/bin/python"
TQ_BUILD="${TQ_BUILD:-$TQ_ROOT/build}"
TQ_SMOLLM2_GGUF="$TQ_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TQ_NPM="$TQ_CACHE/npm"
export TQ_ROOT TQ_CACHE TQ_VENV TQ_PY TQ_BUILD TQ_SMOLLM2_GGUF TQ_NPM
