// libFuzzer target: GgufFile::parse over arbitrary bytes must never crash or read out of bounds.
#include <cstddef>
#include <cstdint>

#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = tq::GgufFile::parse({data, size}, "fuzz.gguf");
  if (!r.ok()) return 0;
  const tq::GgufFile& f = *r;
  for (const auto& kv : f.metadata()) {
    (void)f.get_int(kv.key);
    (void)f.get_float(kv.key);
    (void)f.get_string_array(kv.key);
    (void)f.get_int_array(kv.key);
    (void)f.get_float_array(kv.key);
  }
  for (const auto& t : f.tensors()) {
    if (t.numel() <= (1 << 16)) (void)f.load_f32(t);  // decoders see in-bounds spans only
  }
  return 0;
}
