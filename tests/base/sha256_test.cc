#include "base/sha256.h"

#include <gtest/gtest.h>

#include <random>

#include "../testing/test_files.h"

namespace tq {
namespace {

// FIPS 180-4 / NIST CSHA examples.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnop"
                 "qklmnopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Padding edge cases: 55, 56, 63, 64 and 65 bytes (one or two final blocks).
TEST(Sha256, PaddingBoundaries) {
  EXPECT_EQ(sha256_hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256, ChunkedUpdatesEqualOneShot) {
  std::mt19937 rng(7);
  std::string data(10007, '\0');
  for (char& c : data) c = char(rng());
  const std::string whole = sha256_hex(data);
  for (size_t step : {1, 3, 63, 64, 65, 1000}) {
    Sha256 h;
    for (size_t i = 0; i < data.size(); i += step) h.update(std::string_view(data).substr(i, step));
    EXPECT_EQ(h.hex_digest(), whole) << "step " << step;
  }
}

TEST(Sha256, File) {
  testing::TempDir dir;
  testing::write_file(dir.file("t.txt"), "abc");
  auto h = sha256_file(dir.file("t.txt"));
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(*h, sha256_hex("abc"));
  auto missing = sha256_file(dir.file("nope.txt"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("nope.txt"), std::string::npos);
}

}  // namespace
}  // namespace tq
