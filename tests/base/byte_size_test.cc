#include "base/byte_size.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

TEST(ByteSize, ReadsDecimalAndBinaryUnits) {
  EXPECT_EQ(*parse_byte_size("123456", "--x"), 123456u);
  EXPECT_EQ(*parse_byte_size("0", "--x"), 0u);
  EXPECT_EQ(*parse_byte_size("7B", "--x"), 7u);
  EXPECT_EQ(*parse_byte_size("500MB", "--x"), 500000000u);
  EXPECT_EQ(*parse_byte_size("2KB", "--x"), 2000u);
  EXPECT_EQ(*parse_byte_size("5GB", "--x"), 5000000000u);
  EXPECT_EQ(*parse_byte_size("5GiB", "--x"), 5ull << 30);
  EXPECT_EQ(*parse_byte_size("5G", "--x"), 5ull << 30);
  EXPECT_EQ(*parse_byte_size("3MiB", "--x"), 3ull << 20);
  EXPECT_EQ(*parse_byte_size("3M", "--x"), 3ull << 20);
  EXPECT_EQ(*parse_byte_size("4KiB", "--x"), 4096u);
  EXPECT_EQ(*parse_byte_size("4K", "--x"), 4096u);
  EXPECT_EQ(*parse_byte_size("1.5GiB", "--x"), 1610612736u);
  EXPECT_EQ(*parse_byte_size(".5K", "--x"), 512u);
  EXPECT_EQ(*parse_byte_size("2.", "--x"), 2u);
  EXPECT_EQ(*parse_byte_size("1.9", "--x"), 1u);  // fractions of a byte dropped
}

TEST(ByteSize, RejectsGarbageNamingTheFlag) {
  for (const char* s : {"", "GiB", "5XB", "5 GiB", " 5GiB", "5gib", "-1", "+1", "1e3", "inf", "nan",
                        "0x10", "1.2.3", ".", "5GiBx", "abc", "8EiB", "9999999999G"}) {
    auto r = parse_byte_size(s, "--max-shard-size");
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_EQ(r.error().message, "--max-shard-size '" + std::string(s) +
                                     "': expected a size such as 5GiB, 500MB or 1000000");
  }
}

TEST(ByteSize, StopsBelowTwoToTheSixtyThird) {
  EXPECT_EQ(*parse_byte_size("8589934591G", "--x"), 8589934591ull << 30);
  EXPECT_FALSE(parse_byte_size("8589934592G", "--x").ok());  // 2^63 bytes
}

}  // namespace
}  // namespace tq
