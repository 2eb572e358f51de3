// tokenizer.json "normalizer": NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace, Strip, Sequence.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/result.h"
#include "text/regex.h"

namespace tq::text {

struct Normalizer {
  enum class Kind { kSequence, kNFC, kNFD, kNFKC, kNFKD, kLowercase, kPrepend, kReplace, kStrip };
  Kind kind = Kind::kSequence;
  std::string text;            // Prepend: the prefix; Replace: the literal pattern
  std::string content;         // Replace: the replacement
  std::optional<Regex> regex;  // Replace with a {"Regex": ...} pattern
  bool strip_left = false, strip_right = false;
  std::vector<Normalizer> children;  // Sequence

  // `s` is valid UTF-8; so is the result.
  std::string apply(std::string_view s) const;
};

// Null -> nullopt. Unknown types are an error naming the type and the file.
Result<std::optional<Normalizer>> parse_normalizer(const nlohmann::json& j,
                                                   const std::string& source);
// Refuses a normalizer that grows a mixed probe text more than 16x: encode's cost and memory
// must stay proportional to its input.
Status check_normalizer_growth(const Normalizer& n, const std::string& source);

// Replaces every non-overlapping occurrence of `pattern` (literal, or `regex` when given).
std::string replace_all(std::string_view s, std::string_view pattern, const Regex* regex,
                        std::string_view content);

}  // namespace tq::text
