// Values of the chat-template interpreter (a Jinja2 subset): Python-like dynamic values with
// Python's str()/repr(), truthiness, equality and ordering, so renderings match jinja2's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tq::jinja {

struct Value;
struct Dict;
struct Function;
using ValueList = std::vector<Value>;

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kTuple,
  kDict,
  kNamespace,  // namespace(): a dict whose entries are attributes, assignable with set ns.x
  kFunction,
};

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;  // kString; kUndefined: why it is undefined ("'x' is undefined"), for errors
  std::shared_ptr<ValueList> list;  // kList, kTuple
  std::shared_ptr<Dict> dict;       // kDict, kNamespace
  std::shared_ptr<Function> fn;     // kFunction

  static Value undefined(std::string why = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(ValueList items = {});
  static Value make_tuple(ValueList items);
  static Value make_dict();
  static Value make_namespace();
  static Value function(std::string name, std::function<Result<Value>(struct CallArgs&)> call);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_sequence() const { return kind == Kind::kList || kind == Kind::kTuple; }
  bool is_mapping() const { return kind == Kind::kDict; }
  // bool, int and float: Python's numbers (True == 1)
  bool is_number() const {
    return kind == Kind::kBool || kind == Kind::kInt || kind == Kind::kFloat;
  }
  bool is_integral() const { return kind == Kind::kBool || kind == Kind::kInt; }
  int64_t as_int() const { return kind == Kind::kBool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::kFloat ? f : static_cast<double>(as_int()); }
};

// Insertion-ordered mapping (Python dict); lookups are linear, the dicts here are small.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value v);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The keyword `name`, else positional `index`, else nullptr.
  const Value* get(size_t index, std::string_view name) const;
  // An error unless every keyword is in `names` and there are at most `max_pos` positionals.
  Status check(std::string_view fn, size_t max_pos,
               std::initializer_list<std::string_view> names) const;
};

struct Function {
  std::string name;
  std::function<Result<Value>(CallArgs&)> call;
};

// Python type name of a value ("str", "NoneType", ...), for error messages.
std::string_view type_name(const Value& v);

bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);
// a < b with Python's rules; an error for unorderable types.
Result<bool> less_than(const Value& a, const Value& b);

// What copying `v` costs: its string bytes, plus sizeof(Value) and the weight of every element of
// a list, tuple or dict, at any depth (512 at most). Stops counting once past `cap`.
size_t value_bytes(const Value& v, size_t cap);

// Python's str() and repr(); str() of undefined is "".
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
std::string py_float_repr(double d);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter
// calls it. indent < 0 means None; without separators, Python's defaults.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  int64_t indent = -1;
  std::string indent_str;  // used when the indent argument is a string
  bool indent_is_str = false;
  bool has_separators = false;
  std::string item_sep, key_sep;
  bool sort_keys = false;
};
Result<std::string> to_json_text(const Value& v, const JsonDumpOptions& opt);

// JSON (messages, tools, extra variables) to values; objects keep their key order.
Result<Value> from_json(const nlohmann::json& j);
Result<Value> from_json(const nlohmann::ordered_json& j);

// Python strings index code points; a stray or truncated byte is one U+FFFD (base/utf8.h).
size_t cp_count(std::string_view s);
std::vector<std::string> cp_split(std::string_view s);  // one string per code point
bool is_py_space(char32_t c);                           // str.isspace()

}  // namespace tq::jinja
