// libFuzzer: arbitrary bytes as a prompt-cache block file (serve/block_file.h). Parsing must end
// in a block whose sizes agree with its header and whose key matches its tokens, or an error,
// never a crash; a parsed block re-encodes to the same bytes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "serve/block_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq::serve;
  const std::span<const uint8_t> bytes(data, size);
  auto p = parse_block_file(bytes);
  if (!p.ok()) {
    if (p.error().message.empty()) __builtin_trap();
    return 0;
  }
  const BlockHeader& h = p->header;
  if (p->payload.size() != h.payload_bytes) __builtin_trap();
  if (block_key(h.parent, h.tokens) != h.key) __builtin_trap();
  const auto again = encode_block_file(h, p->payload);
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) __builtin_trap();
  return 0;
}
