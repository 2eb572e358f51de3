// libFuzzer target: any bytes as tokenizer.json must load or fail with an error, never crash;
// a tokenizer that loads must encode and decode a fixed text and arbitrary ids.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  auto t = tq::Tokenizer::from_json(json, "fuzz.json");
  if (!t.ok()) return 0;
  static constexpr std::string_view kText =
      "Hello, world! It's 2024 \xE4\xB8\xAD\xE6\x96\x87 <s> <|im_start|>\r\n  \xF0\x9F\x98\x80 "
      "e\xCC\x81 \xFF end";
  for (bool add_special : {false, true}) {
    std::vector<int32_t> ids = t->encode(kText, add_special);
    (void)t->decode(ids, /*skip_special=*/false);
    (void)t->decode(ids, /*skip_special=*/true);
  }
  std::vector<int32_t> odd = {-1, 0, 1, 2, 3, 255, 256, 1000, 32000, 151643, INT32_MAX};
  (void)t->decode(odd);
  (void)t->vocab_size();
  for (int32_t id : odd) {
    (void)t->id_to_token(id);
    (void)t->is_special(id);
  }
  (void)t->token_to_id("a");
  return 0;
}
