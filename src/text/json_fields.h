// Typed access to tokenizer.json fields with errors that name the file and the component.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tq::text {

using nlohmann::json;

// Where a field lives, for error messages: the file and the component ("pre_tokenizer Split").
struct JsonWhere {
  const std::string& source;
  std::string what;
};

inline const json* find_field(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

inline Result<std::optional<std::string>> opt_string(const json& obj, std::string_view key,
                                                     const JsonWhere& w) {
  const json* v = find_field(obj, key);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return err("{}: {}: '{}' must be a string", w.source, w.what, key);
  return std::optional<std::string>(v->get<std::string>());
}

inline Result<std::string> req_string(const json& obj, std::string_view key, const JsonWhere& w) {
  TQ_TRY(auto s, opt_string(obj, key, w));
  if (!s) return err("{}: {}: missing string '{}'", w.source, w.what, key);
  return *s;
}

inline Result<bool> opt_bool(const json& obj, std::string_view key, bool dflt, const JsonWhere& w) {
  const json* v = find_field(obj, key);
  if (!v) return dflt;
  if (!v->is_boolean()) return err("{}: {}: '{}' must be true or false", w.source, w.what, key);
  return v->get<bool>();
}

// An integer in [lo, hi].
inline Result<int64_t> req_int(const json& obj, std::string_view key, int64_t lo, int64_t hi,
                               const JsonWhere& w) {
  const json* v = find_field(obj, key);
  if (!v || !v->is_number_integer()) {
    return err("{}: {}: '{}' must be an integer", w.source, w.what, key);
  }
  if (v->is_number_unsigned() ? v->get<uint64_t>() > static_cast<uint64_t>(hi)
                              : (v->get<int64_t>() < lo || v->get<int64_t>() > hi)) {
    return err("{}: {}: '{}' out of range [{}, {}]", w.source, w.what, key, lo, hi);
  }
  return v->get<int64_t>();
}

// The single character of a one-character string field (e.g. Metaspace "replacement").
Result<std::string> req_char(const json& obj, std::string_view key, const JsonWhere& w);

// A {"String": s} or {"Regex": r} pattern object; `is_regex` tells which.
struct PatternSpec {
  std::string text;
  bool is_regex = false;
};
Result<PatternSpec> req_pattern(const json& obj, std::string_view key, const JsonWhere& w);

// Largest token id we accept; real vocabularies are below 2^20.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

}  // namespace tq::text
