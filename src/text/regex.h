// PCRE2 regexes that behave like the Oniguruma (Ruby syntax) ones of the Rust tokenizers crate,
// and whole-subject patterns for recipes. Every match runs under a match and depth limit, so a
// pattern read from a file cannot backtrack for minutes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace tq::text {

// Per-call bounds of pcre2_match: backtracking steps, and nested backtracking frames (the
// interpreter's; JIT code is bounded by its 8 MB stack instead).
constexpr uint32_t kRegexMatchLimit = 10'000'000;
constexpr uint32_t kRegexDepthLimit = 100'000;

class Regex {
 public:
  // Compiles an Oniguruma-syntax pattern (\s, \S, \h, \H translated to PCRE2 equivalents).
  // `source` names the tokenizer file in error messages. A pattern that exceeds the limits on
  // check_cost's subjects is refused.
  static Result<Regex> compile(std::string_view pattern, const std::string& source);
  // A pattern matching `literal` exactly.
  static Result<Regex> literal(std::string_view literal, const std::string& source);
  // A PCRE2-syntax pattern that must match a whole subject, read as bytes (no UTF). The error
  // holds PCRE2's message and offset only: callers name the file and the pattern.
  static Result<Regex> compile_whole(std::string_view pattern);

  // All non-overlapping matches [start, end) in order, iterating as onig's find_iter does (an
  // empty match right after the previous match is skipped by one character). `s` is valid UTF-8.
  // Should a call exceed the limits anyway, the rest of `s` is left unmatched.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

  // Whether a compile_whole pattern matches all of `s`; an error naming the limit it exceeded.
  Result<bool> match_whole(std::string_view s) const;

  // Runs the pattern under the limits on subjects where nested quantifiers ((a+)+, (.*.*)*)
  // backtrack exponentially: runs of one character (each the pattern names, letters, digits,
  // space, '.', '_') with and without a stray byte after them, and a long dotted path. An error
  // names the limit and the first subject that exceeded it.
  Status check_cost() const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

// Translates Oniguruma escapes whose meaning differs in PCRE2; exposed for tests.
std::string onig_to_pcre2(std::string_view pattern);

}  // namespace tq::text
