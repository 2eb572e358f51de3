#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/unicode.h"

namespace tq::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool whole = false;   // compile_whole: matched by match_whole, else searched by find_all
  std::string pattern;  // as written, for check_cost's subjects
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
constexpr size_t kCostRun = 128;  // exponential backtracking on 128 characters exceeds any limit

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
    if (ctx) {
      pcre2_set_match_limit(ctx, kRegexMatchLimit);
      pcre2_set_depth_limit(ctx, kRegexDepthLimit);
    }
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

bool is_limit(int rc) {
  return rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
         rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return fmt::format("error {}", code);
  return reinterpret_cast<const char*>(buf);
}

Result<pcre2_code*> compile_code(std::string_view pattern, uint32_t options) {
  int errcode = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &errcode, &erroff, nullptr);
  if (!code) return err("{} at offset {}", pcre2_message(errcode), erroff);
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
  return code;
}

// Searches `s` as find_all does; returns 0, or the limit a call exceeded (the rest unmatched).
int scan(const pcre2_code* code, std::string_view s, std::vector<std::pair<size_t, size_t>>& out) {
  MatchState& st = match_state();
  if (!st.data) return PCRE2_ERROR_NOMEMORY;
  size_t last_end = 0;
  bool have_prev = false;
  size_t prev_end = 0;
  while (last_end <= s.size()) {
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), last_end,
                         PCRE2_NO_UTF_CHECK, st.data, st.ctx);
    if (rc < 0) return rc == PCRE2_ERROR_NOMATCH ? 0 : rc;
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
  return 0;
}

int match_whole_rc(const pcre2_code* code, std::string_view s) {
  MatchState& st = match_state();
  if (!st.data) return PCRE2_ERROR_NOMEMORY;
  return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, st.data, st.ctx);
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
  auto code = compile_code(onig_to_pcre2(pattern), PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE);
  if (!code)
    return err("{}: regex '{}' does not compile: {}", source, pattern, code.error().message);
  Regex r;
  auto owned = std::make_shared<Code>();
  owned->code = *code;
  owned->pattern = std::string(pattern);
  r.code_ = std::move(owned);
  Status cost = r.check_cost();
  if (!cost.ok())
    return err("{}: regex '{}' is too costly to match: {}", source, pattern, cost.error().message);
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

Result<Regex> Regex::compile_whole(std::string_view pattern) {
  // Anchored at both ends: a recipe rule matches the whole module path.
  TQ_TRY(pcre2_code * code,
         compile_code(pattern, PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_NEVER_UTF));
  Regex r;
  auto owned = std::make_shared<Code>();
  owned->code = code;
  owned->whole = true;
  owned->pattern = std::string(pattern);
  r.code_ = std::move(owned);
  return r;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (code_) (void)scan(code_->code, s, out);
  return out;
}

Result<bool> Regex::match_whole(std::string_view s) const {
  if (!code_) return false;
  int rc = match_whole_rc(code_->code, s);
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  return err("{}", pcre2_message(rc));
}

Status Regex::check_cost() const {
  if (!code_) return ok_status();
  // After each run come the printable characters the pattern names (so its required literals
  // are present and PCRE2 cannot skip the attempt), then a byte that fails the match.
  std::string named;
  for (char c : code_->pattern)
    if (c >= 0x20 && c < 0x7f && named.find(c) == std::string::npos) named += c;
  const std::string tail = named + "\x01";
  std::vector<std::pair<size_t, size_t>> found;
  auto costly = [&](const std::string& subject) {
    found.clear();
    int rc =
        code_->whole ? match_whole_rc(code_->code, subject) : scan(code_->code, subject, found);
    return is_limit(rc) ? rc : 0;
  };
  std::string chars;
  for (char c : "aA0 ._\n" + named)
    if (chars.find(c) == std::string::npos) chars += c;
  for (char c : chars) {
    if (int rc = costly(std::string(kCostRun, c) + tail))
      return err("{} on a run of {} '{}'", pcre2_message(rc), kCostRun,
                 c == '\n' ? std::string("\\n") : std::string(1, c));
  }
  std::string path;
  while (path.size() < 200) path += "model.layers.10.self_attn.q_proj.";
  if (int rc = costly(path + tail))
    return err("{} on a {}-byte module path", pcre2_message(rc), path.size());
  return ok_status();
}

}  // namespace tq::text
