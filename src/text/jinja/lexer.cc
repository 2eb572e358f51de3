#include "text/jinja/lexer.h"

#include <algorithm>

#include "base/utf8.h"
#include "text/jinja/value.h"

namespace tq::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's str.isspace() on the code point at s[p]; its byte length in *len.
bool space_at(std::string_view s, size_t p, size_t* len) {
  size_t q = p;
  char32_t c = next_code_point_lossy(s, q);
  *len = q - p;
  return is_py_space(c);
}

size_t skip_space(std::string_view s, size_t p) {
  size_t len = 0;
  while (p < s.size() && space_at(s, p, &len)) p += len;
  return p;
}

// Python's str.rstrip(): the length of s without trailing whitespace.
size_t rstrip_len(std::string_view s) {
  size_t end = 0;
  for (size_t p = 0, len = 0; p < s.size(); p += len)
    if (!space_at(s, p, &len)) end = p + len;
  return end;
}

bool all_space(std::string_view s) {
  if (s.empty()) return false;
  for (size_t p = 0, len = 0; p < s.size(); p += len)
    if (!space_at(s, p, &len)) return false;
  return true;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k)
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
  }

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) TQ_CHECK_OK(step());
    out_.push_back(token(Tok::kEof, src_.size()));
    return std::move(out_);
  }

 private:
  Token token(Tok type, size_t at, std::string text = {}) const {
    Token t;
    t.type = type;
    t.text = std::move(text);
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at) - 1;
    t.line = static_cast<int>(it - line_starts_.begin()) + 1;
    t.col = static_cast<int>(at - *it) + 1;
    return t;
  }

  template <typename... Args>
  Error fail(size_t at, fmt::format_string<Args...> f, Args&&... args) const {
    Token t = token(Tok::kEof, at);
    return err("line {} col {}: {}", t.line, t.col, fmt::format(f, std::forward<Args>(args)...));
  }

  bool starts(size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }

  // Data before a tag: `-` strips all whitespace; lstrip_blocks strips a line's indentation
  // before {% and {# (not {{) unless the tag says `+`.
  void emit_text(size_t from, size_t to, char sign, bool lstrip_ok) {
    std::string_view text(src_.data() + from, to - from);
    if (sign == '-') {
      text = text.substr(0, rstrip_len(text));
    } else if (sign != '+' && lstrip_ok) {
      size_t nl = text.rfind('\n');
      size_t l = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l > 0 || line_starting_) && all_space(text.substr(l))) text = text.substr(0, l);
    }
    if (!text.empty()) out_.push_back(token(Tok::kText, from, std::string(text)));
  }

  Status step() {
    size_t tag = pos_;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= src_.size()) {
        out_.push_back(token(Tok::kText, pos_, src_.substr(pos_)));
        pos_ = src_.size();
        return ok_status();
      }
      char k = src_[tag + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++tag;
    }
    char kind = src_[tag + 1];
    size_t p = tag + 2;
    char sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    if (kind == '%') {
      size_t q = skip_space(src_, p);
      if (starts(q, "raw")) {
        q = skip_space(src_, q + 3);
        if (starts(q, "-%}")) return raw(tag, sign, skip_space(src_, q + 3));
        if (starts(q, "%}")) return raw(tag, sign, q + 2);
      }
    }
    emit_text(pos_, tag, sign, kind != '{');
    if (kind == '#') return comment(tag, p);
    out_.push_back(token(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, tag));
    return tag_body(tag, kind, p);
  }

  Status comment(size_t tag, size_t p) {
    size_t e = src_.find("#}", p);
    if (e == std::string::npos) return fail(tag, "missing end of comment tag");
    size_t end = e + 2;
    if (e > p && src_[e - 1] == '-') {
      end = skip_space(src_, end);
    } else if (!(e > p && src_[e - 1] == '+') && end < src_.size() && src_[end] == '\n') {
      ++end;  // trim_blocks
    }
    finish(end);
    return ok_status();
  }

  Status raw(size_t tag, char sign, size_t body) {
    emit_text(pos_, tag, sign, true);
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    for (size_t e = src_.find("{%", body); e != std::string::npos; e = src_.find("{%", e + 1)) {
      size_t q = e + 2;
      char esign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) esign = src_[q++];
      q = skip_space(src_, q);
      if (!starts(q, "endraw")) continue;
      q = skip_space(src_, q + 6);
      size_t end;
      if (starts(q, "+%}")) {
        end = q + 3;
      } else if (starts(q, "-%}")) {
        end = skip_space(src_, q + 3);
      } else if (starts(q, "%}")) {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      pos_ = body;
      emit_text(body, e, esign, true);
      finish(end);
      return ok_status();
    }
    return fail(tag, "missing end of raw directive");
  }

  void finish(size_t end) {
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  Status tag_body(size_t tag, char kind, size_t p) {
    std::vector<char> balance;
    while (true) {
      size_t len = 0;
      while (p < src_.size() && space_at(src_, p, &len)) p += len;
      if (p >= src_.size())
        return fail(tag, "unexpected end of template, expected '{}'", kind == '%' ? "%}" : "}}");
      if (balance.empty()) {
        size_t end = 0;
        if (kind == '%') {
          if (starts(p, "+%}")) {
            end = p + 3;
          } else if (starts(p, "-%}")) {
            end = skip_space(src_, p + 3);
          } else if (starts(p, "%}")) {
            end = p + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
          }
        } else if (starts(p, "-}}")) {
          end = skip_space(src_, p + 3);
        } else if (starts(p, "}}")) {
          end = p + 2;
        }
        if (end) {
          out_.push_back(token(kind == '%' ? Tok::kBlockEnd : Tok::kVarEnd, p));
          finish(end);
          return ok_status();
        }
      }
      TQ_TRY(p, inner_token(p, balance));
    }
  }

  Result<size_t> inner_token(size_t p, std::vector<char>& balance) {
    char c = src_[p];
    if (is_name_start(c)) {
      size_t q = p;
      while (q < src_.size() && is_name_char(src_[q])) ++q;
      out_.push_back(token(Tok::kName, p, src_.substr(p, q - p)));
      return q;
    }
    if (is_digit(c)) return number(p);
    if (c == '\'' || c == '"') return string(p);
    static constexpr std::string_view kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
    for (auto op : kTwo) {
      if (starts(p, op)) {
        out_.push_back(token(Tok::kOp, p, std::string(op)));
        return p + 2;
      }
    }
    if (std::string_view("+-*/%~[](){}<>=.:|,;").find(c) == std::string_view::npos)
      return fail(p, "unexpected character '{}'",
                  c >= 0x20 && c < 0x7F ? std::string(1, c)
                                        : fmt::format("\\x{:02x}", static_cast<unsigned char>(c)));
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) return fail(p, "unexpected '{}'", c);
      if (balance.back() != c) return fail(p, "unexpected '{}', expected '{}'", c, balance.back());
      balance.pop_back();
    }
    out_.push_back(token(Tok::kOp, p, std::string(1, c)));
    return p + 1;
  }

  // Reads digits with single '_' separators in `base`; returns the end position.
  size_t digits(size_t p, int base, std::string& out) const {
    auto ok = [&](char c) {
      if (base == 16) return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      return c >= '0' && c < '0' + base;
    };
    while (p < src_.size()) {
      if (ok(src_[p])) {
        out += src_[p++];
      } else if (src_[p] == '_' && !out.empty() && p + 1 < src_.size() && ok(src_[p + 1])) {
        ++p;
      } else {
        break;
      }
    }
    return p;
  }

  Result<size_t> number(size_t p) {
    std::string d;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      char x = static_cast<char>(src_[p + 1] | 0x20);
      int base = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
      if (base) {
        size_t q = digits(p + 2, base, d);
        if (d.empty()) return fail(p, "invalid number literal");
        return int_token(p, q, d, base);
      }
    }
    size_t q = digits(p, 10, d);
    bool after_dot = p > 0 && src_[p - 1] == '.';
    bool is_float = false;
    std::string f = d;
    size_t r = q;
    if (!after_dot && r + 1 < src_.size() && src_[r] == '.' && is_digit(src_[r + 1])) {
      f += '.';
      r = digits(r + 1, 10, f);
      is_float = true;
    }
    if (!after_dot && r < src_.size() && (src_[r] | 0x20) == 'e') {
      size_t s = r + 1;
      std::string e = "e";
      if (s < src_.size() && (src_[s] == '+' || src_[s] == '-')) e += src_[s++];
      std::string ed;
      size_t t = digits(s, 10, ed);
      if (!ed.empty()) {
        f += e + ed;
        r = t;
        is_float = true;
      }
    }
    if (!is_float) return int_token(p, q, d, 10);
    Token t = token(Tok::kFloat, p, f);
    t.fval = std::strtod(f.c_str(), nullptr);
    out_.push_back(std::move(t));
    return r;
  }

  Result<size_t> int_token(size_t p, size_t q, const std::string& d, int base) {
    int64_t v = 0;
    for (char c : d) {
      int dv = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
      if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, dv, &v))
        return fail(p, "integer literal too large");
    }
    Token t = token(Tok::kInt, p, src_.substr(p, q - p));
    t.ival = v;
    out_.push_back(std::move(t));
    return q;
  }

  // Python's unicode-escape decoding of a string literal's body.
  Result<size_t> string(size_t p) {
    char q = src_[p];
    std::string out;
    size_t k = p + 1;
    while (true) {
      if (k >= src_.size()) return fail(p, "unterminated string literal");
      char c = src_[k];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        ++k;
        continue;
      }
      if (k + 1 >= src_.size()) return fail(p, "unterminated string literal");
      char e = src_[k + 1];
      k += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t j = 0; j < n; ++j) {
            char h = k + j < src_.size() ? src_[k + j] : 0;
            int hv = is_digit(h)                              ? h - '0'
                     : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10
                                                              : -1;
            if (hv < 0) return fail(k - 2, "truncated \\{} escape in string literal", e);
            cp = cp * 16 + static_cast<uint32_t>(hv);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return fail(k - 2, "escape \\{} names an invalid code point", e);
          append_utf8(out, cp);
          k += n;
          break;
        }
        case 'N':
          return fail(k - 2, "unsupported \\N{{...}} escape in string literal");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int j = 0; j < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++j)
              cp = cp * 8 + static_cast<uint32_t>(src_[k++] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    out_.push_back(token(Tok::kString, p, std::move(out)));
    return k + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

Result<std::vector<Token>> lex(std::string_view source) {
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).run();
}

}  // namespace tq::jinja
