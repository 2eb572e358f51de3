// UTF-8 and Unicode helpers for the tokenizer pipeline. Every function here expects valid UTF-8
// except those that make it valid (is_valid_utf8, utf8_lossy).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tq::text {

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
void append_utf8(std::string& out, char32_t cp);

bool is_valid_utf8(std::string_view s);
// Replaces each maximal invalid subpart with U+FFFD, as Rust's String::from_utf8_lossy does.
std::string utf8_lossy(std::string_view s);

// Rust char predicates: is_whitespace (White_Space), is_numeric (Nd|Nl|No), is_alphanumeric.
bool is_white_space(char32_t cp);
bool is_numeric(char32_t cp);
bool is_word_char(char32_t cp);  // regex \w: alphabetic, marks, digits, connector punctuation

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize_unicode(std::string_view s, NormalForm form);
// Per-character full lowercase mapping (Rust char::to_lowercase).
std::string lowercase(std::string_view s);

}  // namespace tq::text
