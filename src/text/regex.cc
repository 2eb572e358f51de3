#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/unicode.h"

namespace tq::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Oniguruma's Unicode classes, spelled out so PCRE2 (whose \s adds U+180E, whose \w lacks marks
// and which reads \h as horizontal space) matches the same characters.
constexpr const char* kSpaceSet =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}";
constexpr const char* kWordSet = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr const char* kHexSet = "0-9a-fA-F";

// Per-thread match state shared by all patterns: only the whole-match offsets are read.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (ctx && stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[++i];
      const char* set = e == 's' || e == 'S'   ? kSpaceSet
                        : e == 'w' || e == 'W' ? kWordSet
                        : e == 'h' || e == 'H' ? kHexSet
                                               : nullptr;
      bool negated = e == 'S' || e == 'W' || e == 'H';
      if (set && !in_class) {
        out += negated ? "[^" : "[";
        out += set;
        out += ']';
      } else if (set && !negated) {
        out += set;
      } else {  // other escapes (and negated sets inside a class) keep their PCRE2 meaning
        out += '\\';
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Result<Regex> Regex::compile(std::string_view pattern, const std::string& source) {
  std::string translated = onig_to_pcre2(pattern);
  int errcode = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &errcode, &erroff, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(errcode, buf, sizeof(buf));
    return err("{}: regex '{}' does not compile: {} at offset {}", source, pattern,
               reinterpret_cast<const char*>(buf), erroff);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
  Regex r;
  auto owned = std::make_shared<Code>();
  owned->code = code;
  r.code_ = std::move(owned);
  return r;
}

Result<Regex> Regex::literal(std::string_view literal, const std::string& source) {
  std::string quoted;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) quoted += '\\';
    quoted += c;
  }
  return compile(quoted, source);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (!code_) return out;
  MatchState& st = match_state();
  if (!st.data) return out;
  size_t last_end = 0;
  bool have_prev = false;
  size_t prev_end = 0;
  while (last_end <= s.size()) {
    int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), last_end,
                         PCRE2_NO_UTF_CHECK, st.data, st.ctx);
    if (rc < 0) break;  // no match (or a resource limit: the rest is treated as unmatched)
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t a = ov[0], b = ov[1];
    if (a == b && have_prev && prev_end == b) {
      // onig skips an empty match adjacent to the previous one and retries one character later
      if (last_end >= s.size()) break;
      last_end += utf8_len(static_cast<unsigned char>(s[last_end]));
      continue;
    }
    out.emplace_back(a, b);
    last_end = b;
    prev_end = b;
    have_prev = true;
  }
  return out;
}

}  // namespace tq::text
