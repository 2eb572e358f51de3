#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "base/utf8.h"

namespace tq::jinja {

Value Value::undefined(std::string why) {
  Value v;
  v.s = std::move(why);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::kBool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::kInt;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(ValueList items) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::make_tuple(ValueList items) {
  Value v = make_list(std::move(items));
  v.kind = Kind::kTuple;
  return v;
}
Value Value::make_dict() {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>();
  return v;
}
Value Value::make_namespace() {
  Value v = make_dict();
  v.kind = Kind::kNamespace;
  return v;
}
Value Value::function(std::string name, std::function<Result<Value>(CallArgs&)> call) {
  Value v;
  v.kind = Kind::kFunction;
  v.fn = std::make_shared<Function>(Function{std::move(name), std::move(call)});
  return v;
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}
const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.kind == Kind::kString && k.s == key) return &v;
  return nullptr;
}
void Dict::set(Value key, Value v) {
  for (auto& [k, old] : items) {
    if (equals(k, key)) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(v));
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return index < pos.size() ? &pos[index] : nullptr;
}

Status CallArgs::check(std::string_view fn, size_t max_pos,
                       std::initializer_list<std::string_view> names) const {
  if (pos.size() > max_pos)
    return err("{}() takes at most {} positional arguments ({} given)", fn, max_pos, pos.size());
  for (const auto& [k, v] : kw) {
    size_t idx = 0;
    bool found = false;
    for (auto n : names) {
      if (n == k) {
        found = true;
        if (idx < pos.size()) return err("{}() got multiple values for argument '{}'", fn, k);
      }
      ++idx;
    }
    if (!found) return err("{}() got an unexpected keyword argument '{}'", fn, k);
  }
  return ok_status();
}

std::string_view type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.b;
    case Kind::kInt:
      return v.i != 0;
    case Kind::kFloat:
      return v.f != 0.0;
    case Kind::kString:
      return !v.s.empty();
    case Kind::kList:
    case Kind::kTuple:
      return !v.list->empty();
    case Kind::kDict:
      return !v.dict->items.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.s == b.s;
    case Kind::kList:
    case Kind::kTuple: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      return true;
    }
    case Kind::kDict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return a.dict == b.dict;
    case Kind::kFunction:
      return a.fn == b.fn;
    default:
      return false;
  }
}

Result<bool> less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.kind == Kind::kString && b.kind == Kind::kString) return a.s < b.s;  // UTF-8 order
  if (a.is_sequence() && a.kind == b.kind) {
    const auto& x = *a.list;
    const auto& y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equals(x[k], y[k])) continue;
      return less_than(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  return err("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

namespace {

// Python's str.isprintable() for the characters repr() keeps as they are (approximate outside
// Latin-1: the common format and separator characters are escaped).
bool py_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c >= 0x80 && c <= 0xA0) return false;
  if (c == 0xAD || c == 0x1680 || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F))
    return false;
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  return true;
}

void append_repr_string(std::string& out, std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = has_single && !has_double ? '"' : '\'';
  out += q;
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_code_point_lossy(s, i);
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (py_printable(c)) {
      append_utf8(out, c);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  out += q;
}

void append_repr(std::string& out, const Value& v);

void append_items(std::string& out, const ValueList& items) {
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out += ", ";
    append_repr(out, items[k]);
  }
}

void append_dict(std::string& out, const Dict& d) {
  out += '{';
  for (size_t k = 0; k < d.items.size(); ++k) {
    if (k) out += ", ";
    append_repr(out, d.items[k].first);
    out += ": ";
    append_repr(out, d.items[k].second);
  }
  out += '}';
}

void append_repr(std::string& out, const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      out += "Undefined";
      break;
    case Kind::kString:
      append_repr_string(out, v.s);
      break;
    case Kind::kList:
      out += '[';
      append_items(out, *v.list);
      out += ']';
      break;
    case Kind::kTuple:
      out += '(';
      append_items(out, *v.list);
      if (v.list->size() == 1) out += ',';
      out += ')';
      break;
    case Kind::kDict:
      append_dict(out, *v.dict);
      break;
    case Kind::kNamespace:
      out += "<Namespace ";
      append_dict(out, *v.dict);
      out += '>';
      break;
    default:
      out += py_str(v);
  }
}

}  // namespace

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's 'r' layout: fixed for 1e-4 <= |d| < 1e16.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string out;
  size_t p = 0;
  if (sci[0] == '-') {
    out += '-';
    p = 1;
  }
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t k = p; k < epos; ++k)
    if (sci[k] != '.') digits += sci[k];
  int exp = std::stoi(sci.substr(epos + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min(digits.size(), static_cast<size_t>(exp) + 1));
      while (ip.size() < static_cast<size_t>(exp) + 1) ip += '0';
      std::string fp = digits.size() > ip.size() ? digits.substr(ip.size()) : "0";
      out += ip + "." + fp;
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out;
}

namespace {

// Depth-bounded: a namespace holding itself is walked only until `cap` or 512 levels.
void add_bytes(const Value& v, size_t cap, int depth, size_t& total) {
  total += v.s.size();
  if (depth > 512) return;
  if (v.list) {
    for (const Value& x : *v.list) {
      if (total > cap) return;
      total += sizeof(Value);
      add_bytes(x, cap, depth + 1, total);
    }
  }
  if (v.dict) {
    for (const auto& [k, x] : v.dict->items) {
      if (total > cap) return;
      total += 2 * sizeof(Value);
      add_bytes(k, cap, depth + 1, total);
      add_bytes(x, cap, depth + 1, total);
    }
  }
}

}  // namespace

size_t value_bytes(const Value& v, size_t cap) {
  size_t total = 0;
  add_bytes(v, cap, 0, total);
  return total;
}

std::string py_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return {};
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return v.b ? "True" : "False";
    case Kind::kInt:
      return std::to_string(v.i);
    case Kind::kFloat:
      return py_float_repr(v.f);
    case Kind::kString:
      return v.s;
    case Kind::kFunction:
      return "<function " + v.fn->name + ">";
    default: {
      std::string out;
      append_repr(out, v);
      return out;
    }
  }
}

std::string py_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) next_code_point_lossy(s, i);
  return n;
}

std::vector<std::string> cp_split(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    next_code_point_lossy(s, i);
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace tq::jinja
