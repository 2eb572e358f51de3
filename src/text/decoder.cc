#include "text/decoder.h"

#include "text/json_fields.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/unicode.h"

namespace tq::text {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xXX>" -> the byte, as tokenizers parses it (u8::from_str_radix also takes "+X").
int byte_token(const std::string& t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  if (t[3] == '+') return hex_digit(t[4]);
  int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void flush_bytes(std::string& bytes, std::vector<std::string>& out) {
  if (bytes.empty()) return;
  if (is_valid_utf8(bytes)) {
    out.push_back(bytes);
  } else {
    for (size_t k = 0; k < bytes.size(); ++k) out.push_back("\xEF\xBF\xBD");
  }
  bytes.clear();
}

// Strip: removes up to `start` leading and `stop` trailing copies of the character `c`.
std::string strip_token(const std::string& t, char32_t c, size_t start, size_t stop) {
  std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
  for (size_t i = 0; i < t.size();) {
    size_t at = i;
    chars.emplace_back(at, next_code_point(t, i));
  }
  size_t a = 0;
  while (a < chars.size() && a < start && chars[a].second == c) ++a;
  size_t b = chars.size();
  for (size_t k = 0; k < stop && b > a && chars[b - 1].second == c; ++k) --b;
  size_t from = a < chars.size() ? chars[a].first : t.size();
  size_t to = b < chars.size() ? chars[b].first : t.size();
  return t.substr(from, to - from);
}

}  // namespace

void Decoder::apply(std::vector<std::string>& tokens) const {
  switch (kind) {
    case Kind::kSequence:
      for (const Decoder& d : children) d.apply(tokens);
      return;
    case Kind::kByteLevel: {
      // A token with any character outside the byte alphabet passes through as its UTF-8.
      std::string bytes;
      for (const std::string& t : tokens) {
        size_t mark = bytes.size();
        bool all = true;
        for (size_t i = 0; i < t.size() && all;) {
          int b = unicode_to_byte(next_code_point(t, i));
          if (b < 0) {
            all = false;
          } else {
            bytes += static_cast<char>(b);
          }
        }
        if (!all) {
          bytes.resize(mark);
          bytes += t;
        }
      }
      tokens.assign(1, utf8_lossy(bytes));
      return;
    }
    case Kind::kReplace:
      for (std::string& t : tokens) t = replace_all(t, text, regex ? &*regex : nullptr, content);
      return;
    case Kind::kByteFallback: {
      std::vector<std::string> out;
      std::string bytes;
      for (std::string& t : tokens) {
        int b = byte_token(t);
        if (b >= 0) {
          bytes += static_cast<char>(b);
        } else {
          flush_bytes(bytes, out);
          out.push_back(std::move(t));
        }
      }
      flush_bytes(bytes, out);
      tokens = std::move(out);
      return;
    }
    case Kind::kFuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      return;
    }
    case Kind::kStrip: {
      size_t i = 0;
      char32_t c = next_code_point(text, i);
      for (std::string& t : tokens) t = strip_token(t, c, strip_start, strip_stop);
      return;
    }
    case Kind::kMetaspace:
      for (size_t k = 0; k < tokens.size(); ++k) {
        // the first token loses every replacement character, the others turn them into spaces
        std::string_view with = (k == 0 && prepend) ? std::string_view() : std::string_view(" ");
        tokens[k] = replace_all(tokens[k], text, nullptr, with);
      }
      return;
  }
}

Result<std::optional<Decoder>> parse_decoder(const nlohmann::json& j, const std::string& source) {
  if (j.is_null()) return std::optional<Decoder>();
  JsonWhere w{source, "decoder"};
  TQ_TRY(std::string type, req_string(j, "type", w));
  w.what = "decoder " + type;
  Decoder d;
  if (type == "Sequence") {
    const json* list = find_field(j, "decoders");
    if (!list || !list->is_array()) return err("{}: {}: 'decoders' must be a list", source, w.what);
    for (const json& c : *list) {
      TQ_TRY(auto child, parse_decoder(c, source));
      if (child) d.children.push_back(std::move(*child));
    }
  } else if (type == "ByteLevel") {
    d.kind = Decoder::Kind::kByteLevel;
  } else if (type == "Replace") {
    d.kind = Decoder::Kind::kReplace;
    TQ_TRY(PatternSpec p, req_pattern(j, "pattern", w));
    TQ_TRY(d.content, req_string(j, "content", w));
    if (p.is_regex) {
      TQ_TRY(d.regex, Regex::compile(p.text, source));
    } else {
      d.text = p.text;
    }
  } else if (type == "ByteFallback") {
    d.kind = Decoder::Kind::kByteFallback;
  } else if (type == "Fuse") {
    d.kind = Decoder::Kind::kFuse;
  } else if (type == "Strip") {
    d.kind = Decoder::Kind::kStrip;
    TQ_TRY(d.text, req_char(j, "content", w));
    TQ_TRY(int64_t start, req_int(j, "start", 0, int64_t{1} << 30, w));
    TQ_TRY(int64_t stop, req_int(j, "stop", 0, int64_t{1} << 30, w));
    d.strip_start = static_cast<size_t>(start);
    d.strip_stop = static_cast<size_t>(stop);
  } else if (type == "Metaspace") {
    d.kind = Decoder::Kind::kMetaspace;
    TQ_TRY(d.text, req_char(j, "replacement", w));
    TQ_TRY(bool legacy_prefix, opt_bool(j, "add_prefix_space", true, w));
    d.prepend = legacy_prefix;
    TQ_TRY(auto scheme, opt_string(j, "prepend_scheme", w));
    if (scheme) {
      if (*scheme != "always" && *scheme != "never" && *scheme != "first") {
        return err("{}: {}: unknown prepend_scheme '{}'", source, w.what, *scheme);
      }
      d.prepend = *scheme != "never";
    }
  } else {
    return err("{}: decoder type '{}' is not supported", source, type);
  }
  return std::optional<Decoder>(std::move(d));
}

}  // namespace tq::text
