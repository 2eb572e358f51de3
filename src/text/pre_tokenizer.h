// tokenizer.json "pre_tokenizer": ByteLevel, Split, Digits, Metaspace, Sequence.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/result.h"
#include "text/regex.h"

namespace tq::text {

// One piece of text on its way to the model. `at_origin`: it starts at offset 0 of the input
// (Metaspace's prepend_scheme "first" needs only that much of the offset tracking).
struct TextSplit {
  std::string text;
  bool at_origin = false;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizer {
  enum class Kind { kSequence, kByteLevel, kSplit, kDigits, kMetaspace };
  enum class Prepend { kAlways, kNever, kFirst };
  Kind kind = Kind::kSequence;
  bool add_prefix_space = false;  // ByteLevel
  bool use_regex = true;          // ByteLevel
  std::optional<Regex> regex;     // Split (literal patterns are compiled as escaped regexes)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;                 // Split
  bool individual_digits = false;      // Digits
  std::string replacement;             // Metaspace (one character)
  Prepend prepend = Prepend::kAlways;  // Metaspace
  bool split = true;                   // Metaspace
  std::vector<PreTokenizer> children;  // Sequence

  // Rewrites `splits` in place; empty splits are dropped.
  void apply(std::vector<TextSplit>& splits) const;

 private:
  std::string replace_spaces(const std::string& s) const;  // Metaspace: ' ' -> replacement
};

Result<std::optional<PreTokenizer>> parse_pre_tokenizer(const nlohmann::json& j,
                                                        const std::string& source);

// Maps each byte to its printable stand-in (GPT-2's bytes_to_unicode), as UTF-8.
const std::string& byte_to_unicode(unsigned char b);
// Inverse: the byte for code point `cp`, or -1 when `cp` stands for no byte.
int unicode_to_byte(char32_t cp);

}  // namespace tq::text
