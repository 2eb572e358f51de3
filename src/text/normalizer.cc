#include "text/normalizer.h"

#include "text/json_fields.h"
#include "text/unicode.h"

namespace tq::text {

std::string replace_all(std::string_view s, std::string_view pattern, const Regex* regex,
                        std::string_view content) {
  std::string out;
  size_t prev = 0;
  auto emit = [&](size_t a, size_t b) {
    out.append(s.substr(prev, a - prev));
    out.append(content);
    prev = b;
  };
  if (regex) {
    for (auto [a, b] : regex->find_all(s)) emit(a, b);
  } else if (!pattern.empty()) {  // an empty literal matches nowhere (as tokenizers)
    out.reserve(s.size());
    for (size_t at = s.find(pattern); at != std::string_view::npos; at = s.find(pattern, prev)) {
      emit(at, at + pattern.size());
    }
  }
  out.append(s.substr(prev));
  return out;
}

static std::string strip_spaces(std::string_view s, bool left, bool right) {
  size_t a = 0, b = s.size();
  if (left) {
    while (a < b) {
      size_t i = a;
      if (!is_white_space(next_code_point(s, i))) break;
      a = i;
    }
  }
  if (right) {
    while (b > a) {
      size_t i = b - 1;
      while (i > a && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
      size_t j = i;
      if (!is_white_space(next_code_point(s, j))) break;
      b = i;
    }
  }
  return std::string(s.substr(a, b - a));
}

std::string Normalizer::apply(std::string_view s) const {
  switch (kind) {
    case Kind::kSequence: {
      std::string cur(s);
      for (const Normalizer& c : children) cur = c.apply(cur);
      return cur;
    }
    case Kind::kNFC:
      return normalize_unicode(s, NormalForm::kNFC);
    case Kind::kNFD:
      return normalize_unicode(s, NormalForm::kNFD);
    case Kind::kNFKC:
      return normalize_unicode(s, NormalForm::kNFKC);
    case Kind::kNFKD:
      return normalize_unicode(s, NormalForm::kNFKD);
    case Kind::kLowercase:
      return lowercase(s);
    case Kind::kPrepend:
      return s.empty() ? std::string() : text + std::string(s);
    case Kind::kReplace:
      return replace_all(s, text, regex ? &*regex : nullptr, content);
    case Kind::kStrip:
      return strip_spaces(s, strip_left, strip_right);
  }
  return std::string(s);
}

Status check_normalizer_growth(const Normalizer& n, const std::string& source) {
  // Real normalizers grow text by a few bytes per character at most (" " -> U+2581, NFKD);
  // a text grown more than this on a mixed probe would grow any long input without bound.
  static constexpr std::string_view kProbe =
      "The quick brown fox, 1234 jumps_over\tthe lazy dog! (e = mc^2) [ok] \"q\" ~/path.txt";
  const size_t out = n.apply(kProbe).size(), limit = 16 * kProbe.size() + 256;
  if (out > limit)
    return err("{}: normalizer grows a {}-byte probe text to {} bytes (more than {}): refusing",
               source, kProbe.size(), out, limit);
  return ok_status();
}

Result<std::optional<Normalizer>> parse_normalizer(const nlohmann::json& j,
                                                   const std::string& source) {
  if (j.is_null()) return std::optional<Normalizer>();
  JsonWhere w{source, "normalizer"};
  TQ_TRY(std::string type, req_string(j, "type", w));
  w.what = "normalizer " + type;
  Normalizer n;
  if (type == "Sequence") {
    const json* list = find_field(j, "normalizers");
    if (!list || !list->is_array())
      return err("{}: {}: 'normalizers' must be a list", source, w.what);
    for (const json& c : *list) {
      TQ_TRY(auto child, parse_normalizer(c, source));
      if (child) n.children.push_back(std::move(*child));
    }
  } else if (type == "NFC") {
    n.kind = Normalizer::Kind::kNFC;
  } else if (type == "NFD") {
    n.kind = Normalizer::Kind::kNFD;
  } else if (type == "NFKC") {
    n.kind = Normalizer::Kind::kNFKC;
  } else if (type == "NFKD") {
    n.kind = Normalizer::Kind::kNFKD;
  } else if (type == "Lowercase") {
    n.kind = Normalizer::Kind::kLowercase;
  } else if (type == "Prepend") {
    n.kind = Normalizer::Kind::kPrepend;
    TQ_TRY(n.text, req_string(j, "prepend", w));
  } else if (type == "Replace") {
    n.kind = Normalizer::Kind::kReplace;
    TQ_TRY(PatternSpec p, req_pattern(j, "pattern", w));
    TQ_TRY(n.content, req_string(j, "content", w));
    if (p.is_regex) {
      TQ_TRY(n.regex, Regex::compile(p.text, source));
      // An empty match would insert `content` between every two characters (and chained
      // Replaces multiply that): no real tokenizer does this, so it is refused.
      for (auto [a, b] : n.regex->find_all("a A1,\n"))
        if (a == b)
          return err("{}: {}: pattern '{}' matches the empty string", source, w.what, p.text);
    } else {
      n.text = p.text;
    }
  } else if (type == "Strip") {
    n.kind = Normalizer::Kind::kStrip;
    TQ_TRY(n.strip_left, opt_bool(j, "strip_left", true, w));
    TQ_TRY(n.strip_right, opt_bool(j, "strip_right", true, w));
  } else {
    return err("{}: normalizer type '{}' is not supported", source, type);
  }
  return std::optional<Normalizer>(std::move(n));
}

}  // namespace tq::text
