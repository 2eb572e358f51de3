// Unicode helpers for the tokenizer pipeline (the UTF-8 codec is base/utf8.h). Every function here
// expects valid UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/utf8.h"

namespace tq::text {

// Rust char predicates: is_whitespace (White_Space), is_numeric (Nd|Nl|No), is_alphanumeric.
bool is_white_space(char32_t cp);
bool is_numeric(char32_t cp);
bool is_word_char(char32_t cp);  // regex \w: alphabetic, marks, digits, connector punctuation

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize_unicode(std::string_view s, NormalForm form);
// Per-character full lowercase mapping (Rust char::to_lowercase).
std::string lowercase(std::string_view s);

}  // namespace tq::text
