#include "base/fast_hash.h"

#include <gtest/gtest.h>

#include <vector>

namespace tq {
namespace {

std::vector<uint8_t> bytes(size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i);
  return b;
}

// The same values as tests/integration/test_prompt_cache.py's Python copy (which forges files).
TEST(FastHash, PinnedValues) {
  EXPECT_EQ(fast_hash64(bytes(100)), 0x8e4f000481f1648dULL);
  EXPECT_EQ(fast_hash64({}), 0x3463ae0e889c60d9ULL);
  EXPECT_EQ(fast_hash64(bytes(64), 7), 0xb888c77223be67ddULL);
}

TEST(FastHash, EveryBitFlipAndLengthChangeIsSeen) {
  for (size_t n : {size_t{1}, size_t{31}, size_t{32}, size_t{77}, size_t{300}}) {
    auto b = bytes(n);
    const uint64_t h = fast_hash64(b);
    for (size_t i = 0; i < n; ++i)
      for (int bit = 0; bit < 8; ++bit) {
        b[i] ^= static_cast<uint8_t>(1 << bit);
        EXPECT_NE(fast_hash64(b), h) << n << " bytes, byte " << i << " bit " << bit;
        b[i] ^= static_cast<uint8_t>(1 << bit);
      }
    auto longer = b;
    longer.push_back(0);
    EXPECT_NE(fast_hash64(longer), h);
    EXPECT_NE(fast_hash64(b, 1), h);
  }
}

}  // namespace
}  // namespace tq
