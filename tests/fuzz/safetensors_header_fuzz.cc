// libFuzzer: arbitrary bytes as a whole .safetensors file must parse or fail cleanly, and
// anything accepted must describe tensors that lie inside the buffer.
#include <cstddef>
#include <cstdint>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = tq::parse_safetensors(std::span<const uint8_t>(data, size), "fuzz.safetensors");
  if (!r.ok()) return 0;
  if (r->data_start > size) __builtin_trap();
  const uint64_t buffer = size - r->data_start;
  for (size_t i = 0; i < r->entries.size(); ++i) {
    const auto& e = r->entries[i];
    if (e.begin > e.end || e.end > buffer) __builtin_trap();
    if (i > 0 && !(r->entries[i - 1].name < e.name)) __builtin_trap();
    uint64_t n = tq::dtype_size(e.dtype);
    for (int64_t d : e.shape) n *= static_cast<uint64_t>(d);
    if (n != e.end - e.begin) __builtin_trap();
  }
  return 0;
}
