# Sourced by scripts/test and scripts/fuzz-long (after env.sh): the sanitized libFuzzer build in
# build-fuzz and each target's seed corpus.
TQ_FUZZ_BUILD="$TQ_ROOT/build-fuzz"
TQ_FUZZ_TIMEOUT="${TQ_FUZZ_TIMEOUT:-5}"  # seconds one input may take before it counts as a hang

fuzz_build() {
  if [ ! -f "$TQ_FUZZ_BUILD/build.ninja" ]; then
    cmake -S "$TQ_ROOT" -B "$TQ_FUZZ_BUILD" -G Ninja -DTQ_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  fi
  ninja -C "$TQ_FUZZ_BUILD" --quiet
}

# fuzz_seed NAME DIR: the kept corpus of target NAME (recipe_fuzz: tests/fuzz/corpus/recipe) into
# DIR, plus the model-derived seeds, which are made here and never kept in git.
fuzz_seed() {
  local name="$1" work="$2" corpus="$TQ_ROOT/tests/fuzz/corpus/${1%_fuzz}"
  if [ -d "$corpus" ]; then cp -r "$corpus"/. "$work"/; fi
  if [ "$name" = gguf_fuzz ]; then
    head -c 4096 "$TQ_SMOLLM2_GGUF" >"$work/smollm2_head4k.gguf"
    PYTHONPATH="$TQ_ROOT/tests/integration" "$TQ_PY" -c 'import sys, tinymodels as t
sys.stdout.buffer.write(t.gguf_bytes(t.tiny_llama_gguf_kvs(), t.tiny_llama_gguf_tensors()))' \
      >"$work/tiny_llama.gguf"
  fi
}
