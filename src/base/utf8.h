// The UTF-8 codec: decode, encode, validate. The Unicode character properties the tokenizers
// need are in text/unicode.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tq {

// Length in bytes of the UTF-8 sequence that starts with lead byte `b` (1 for stray bytes).
inline size_t utf8_len(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xF0) return 4;
  if (b >= 0xE0) return 3;
  if (b >= 0xC0) return 2;
  return 1;
}

// Decodes the code point at s[i] (valid UTF-8 assumed); advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
// The same for any bytes: a stray, truncated or broken sequence is one byte read as U+FFFD.
char32_t next_code_point_lossy(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);

bool is_valid_utf8(std::string_view s);
// Replaces each maximal invalid subpart with U+FFFD, as Rust's String::from_utf8_lossy does.
std::string utf8_lossy(std::string_view s);

}  // namespace tq
