#!/usr/bin/env bash
# Builds llama.cpp natively for this CPU (GGML_NATIVE: every instruction set the build machine
# has) from the source the llama-cpp-python sdist on PyPI vendors, pinned by version and hash:
# llama-bench and llama-server in $TQ_CACHE/llama.cpp-native/<version>-<cpu>/bin. Quiet and
# instant when that build exists. Prints the bin directory.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/env.sh"
version=0.3.36
sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
# A native build runs only on CPUs with the same instruction sets: one build per CPU model.
key=$( (grep -m1 '^model name' /proc/cpuinfo; grep -m1 '^flags' /proc/cpuinfo) | sha256sum | cut -c1-12)
out="$TQ_CACHE/llama.cpp-native/$version-$key"
if [ -x "$out/bin/llama-bench" ] && [ -x "$out/bin/llama-server" ]; then
  echo "$out/bin"; exit 0
fi
say() { echo "build_llamacpp: $*" >&2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say "fetching llama-cpp-python==$version (sdist) for its vendored llama.cpp"
"$TQ_VENV/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
  "llama-cpp-python==$version" -d "$tmp" >&2
got=$(sha256sum "$tmp/llama_cpp_python-$version.tar.gz" | cut -d' ' -f1)
[ "$got" = "$sha" ] || { say "error: sdist checksum mismatch ($got)"; exit 1; }
tar xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp" "llama_cpp_python-$version/vendor/llama.cpp"
src="$tmp/llama_cpp_python-$version/vendor/llama.cpp"
say "building llama-bench and llama-server (GGML_NATIVE=ON, CPU only; a few minutes)"
cmake -S "$src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF >"$tmp/cmake.log" 2>&1 ||
  { tail -20 "$tmp/cmake.log" >&2; exit 1; }
ninja -C "$tmp/build" llama-bench llama-server >"$tmp/ninja.log" 2>&1 ||
  { tail -30 "$tmp/ninja.log" >&2; exit 1; }
mkdir -p "$out.part/bin"
cp "$tmp/build/bin/llama-bench" "$tmp/build/bin/llama-server" "$out.part/bin/"
grep -m1 '^model name' /proc/cpuinfo >"$out.part/cpu.txt" || true
rm -rf "$out" && mv "$out.part" "$out"
echo "$out/bin"
