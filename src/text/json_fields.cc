#include "text/json_fields.h"

#include "text/unicode.h"

namespace tq::text {

Result<std::string> req_char(const json& obj, std::string_view key, const JsonWhere& w) {
  TQ_TRY(std::string s, req_string(obj, key, w));
  if (s.empty() || !is_valid_utf8(s) || utf8_len(static_cast<unsigned char>(s[0])) != s.size()) {
    return err("{}: {}: '{}' must be exactly one character", w.source, w.what, key);
  }
  return s;
}

Result<PatternSpec> req_pattern(const json& obj, std::string_view key, const JsonWhere& w) {
  const json* p = find_field(obj, key);
  if (!p || !p->is_object()) {
    return err("{}: {}: '{}' must be {{\"String\": ...}} or {{\"Regex\": ...}}", w.source, w.what,
               key);
  }
  PatternSpec spec;
  if (const json* s = find_field(*p, "String"); s && s->is_string()) {
    spec.text = s->get<std::string>();
  } else if (const json* r = find_field(*p, "Regex"); r && r->is_string()) {
    spec.text = r->get<std::string>();
    spec.is_regex = true;
  } else {
    return err("{}: {}: '{}' must be {{\"String\": ...}} or {{\"Regex\": ...}}", w.source, w.what,
               key);
  }
  if (!is_valid_utf8(spec.text)) {
    return err("{}: {}: '{}' is not valid UTF-8", w.source, w.what, key);
  }
  return spec;
}

}  // namespace tq::text
