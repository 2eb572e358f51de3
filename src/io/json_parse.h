// JSON parsing at file boundaries: exceptions become errors that name the source file.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tq {

struct JsonParseOptions {
  bool reject_duplicate_keys = false;  // nlohmann silently keeps the last duplicate
  int max_depth = 64;                  // nesting limit, so hostile input cannot blow up later
};

// Parses `text` as one JSON value (surrounding whitespace allowed); `source` prefixes errors.
Result<nlohmann::json> parse_json(std::string_view text, const std::string& source,
                                  JsonParseOptions opts = {});
// Reads and parses a whole file (errors name `path`).
Result<nlohmann::json> read_json_file(const std::string& path, JsonParseOptions opts = {});
// Reads a whole regular file into memory.
Result<std::string> read_text_file(const std::string& path);

// `s` with control characters escaped (\x0a), so that error messages stay one line.
std::string printable(std::string_view s);

// "string", "number", "object", ... for error messages.
std::string_view json_type_name(const nlohmann::json& j);

}  // namespace tq
