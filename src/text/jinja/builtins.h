// Python/Jinja semantics the renderer calls into: operators, attribute and item access,
// dict methods (ops.cc), str methods (str_methods.cc), filters (filters.cc), tests (is_tests.cc)
// and globals (globals.cc).
// Errors carry no location; the renderer prefixes the expression's line and column.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "text/jinja/value.h"

namespace tq::jinja {

constexpr size_t kMaxStringBytes = size_t{64} << 20;  // any string or list a template builds

// + - * / // % ** ~ with Python's rules (bool is an int, ints do not overflow silently).
Result<Value> binary_op(std::string_view op, const Value& a, const Value& b);
Result<Value> negate(const Value& v, bool minus);
// `item in container`
Result<bool> contains(const Value& container, const Value& item);
// jinja2's getattr (Python attribute first, then item) and getitem (item first).
Result<Value> get_attr(const Value& obj, const std::string& name);
Result<Value> get_item(const Value& obj, const Value& key);
Result<Value> get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop visits: list/tuple items, dict keys, string characters; undefined is
// empty.
Result<ValueList> iterate(const Value& v);
// An error naming the undefined variable (its use other than printing or testing).
Error undefined_error(const Value& v);

Result<Value> call_filter(std::string_view name, const Value& v, CallArgs& args);
std::vector<std::string_view> filter_names();  // every filter call_filter implements
Result<bool> call_test(std::string_view name, const Value& v, CallArgs& args);
void add_globals(std::unordered_map<std::string, Value>& frame);

// Python str methods on UTF-8 (strip, split, startswith, ...); shared with filters.
bool is_str_method(std::string_view name);  // a name Python's str has
std::string py_strip(std::string_view s, const Value* chars, bool left, bool right);
Result<Value> call_str_method(const std::string& s, std::string_view name, CallArgs& args);
std::vector<std::string_view> str_method_names();  // every method call_str_method implements

}  // namespace tq::jinja
