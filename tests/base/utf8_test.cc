// The UTF-8 codec: the strict decoder the tokenizers use and the lossy one of the chat templates.
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tq {
namespace {

std::vector<char32_t> decode_lossy(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(next_code_point_lossy(s, i));
  return out;
}

TEST(Utf8, RoundTripsEveryLength) {
  for (char32_t cp : {U'a', U'é', U'日', U'😀'}) {
    std::string s;
    append_utf8(s, cp);
    EXPECT_EQ(s.size(), utf8_len(static_cast<unsigned char>(s[0])));
    size_t i = 0, j = 0;
    EXPECT_EQ(next_code_point(s, i), cp);
    EXPECT_EQ(next_code_point_lossy(s, j), cp);
    EXPECT_EQ(i, s.size());
    EXPECT_EQ(j, s.size());
  }
}

TEST(Utf8, LossyDecodeReplacesEachBadByte) {
  // a stray continuation byte, a truncated sequence, a lead byte followed by ASCII
  EXPECT_EQ(decode_lossy("a\x80z"), (std::vector<char32_t>{U'a', 0xFFFD, U'z'}));
  EXPECT_EQ(decode_lossy("\xE6\x97"), (std::vector<char32_t>{0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_lossy("\xC3(x"), (std::vector<char32_t>{0xFFFD, U'(', U'x'}));
  // the strict decoder reads a stray byte as itself
  size_t i = 0;
  EXPECT_EQ(next_code_point("\x80", i), 0x80u);
}

}  // namespace
}  // namespace tq
