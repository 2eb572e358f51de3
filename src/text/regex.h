// PCRE2 regexes that behave like the Oniguruma (Ruby syntax) ones of the Rust tokenizers crate.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace tq::text {

class Regex {
 public:
  // Compiles an Oniguruma-syntax pattern (\s, \S, \h, \H translated to PCRE2 equivalents).
  // `source` names the tokenizer file in error messages.
  static Result<Regex> compile(std::string_view pattern, const std::string& source);
  // A pattern matching `literal` exactly.
  static Result<Regex> literal(std::string_view literal, const std::string& source);

  // All non-overlapping matches [start, end) in order, iterating as onig's find_iter does (an
  // empty match right after the previous match is skipped by one character). `s` is valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

// Translates Oniguruma escapes whose meaning differs in PCRE2; exposed for tests.
std::string onig_to_pcre2(std::string_view pattern);

}  // namespace tq::text
