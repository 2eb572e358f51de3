// Operators, attribute/item/slice access and Python str/dict methods for the template values.
#include <algorithm>
#include <cmath>

#include "text/jinja/builtins.h"

namespace tq::jinja {
namespace {

Error type_error(std::string_view op, const Value& a, const Value& b) {
  return err("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

Result<Value> repeat(const ValueList* list, const std::string* s, int64_t n, Kind kind) {
  // An empty unit repeated is empty however large n is (no loop of n empty appends).
  const bool empty = list ? list->empty() : s->empty();
  if (n <= 0 || empty)
    return list ? (kind == Kind::kTuple ? Value::make_tuple({}) : Value::make_list())
                : Value::string("");
  // Elements are copies: a list's unit counts the strings it holds, not only its slots.
  size_t unit = s ? s->size() : 0;
  if (list)
    for (const Value& x : *list) unit += sizeof(Value) + value_bytes(x, kMaxStringBytes);
  if (static_cast<uint64_t>(n) > kMaxStringBytes / unit)
    return err("repetition result larger than {} bytes", kMaxStringBytes);
  if (s) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += *s;
    return Value::string(std::move(out));
  }
  ValueList out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), list->begin(), list->end());
  return kind == Kind::kTuple ? Value::make_tuple(std::move(out))
                              : Value::make_list(std::move(out));
}

Result<Value> int_pow(int64_t a, int64_t b) {
  int64_t r = 1;
  while (b > 0) {
    if (b & 1)
      if (__builtin_mul_overflow(r, a, &r)) return err("integer overflow in **");
    b >>= 1;
    if (b && __builtin_mul_overflow(a, a, &a)) return err("integer overflow in **");
  }
  return Value::integer(r);
}

constexpr std::string_view kListMethods[] = {"append", "clear",   "copy",   "count",
                                             "extend", "index",   "insert", "pop",
                                             "remove", "reverse", "sort"};
constexpr std::string_view kDictMethods[] = {"clear",      "copy",   "fromkeys", "get",
                                             "items",      "keys",   "pop",      "popitem",
                                             "setdefault", "update", "values"};

template <size_t N>
bool has(const std::string_view (&names)[N], std::string_view n) {
  return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

Value dict_method(const Value& obj, const std::string& name) {
  auto d = obj.dict;
  return Value::function("dict." + name, [d, name](CallArgs& a) -> Result<Value> {
    if (name == "get") {
      TQ_CHECK_OK(a.check("get", 2, {}));
      if (a.pos.empty()) return err("get expected at least 1 argument, got 0");
      const Value* v = d->find(a.pos[0]);
      if (v) return *v;
      return a.pos.size() > 1 ? a.pos[1] : Value::none();
    }
    TQ_CHECK_OK(a.check(name, 0, {}));
    ValueList out;
    for (const auto& [k, v] : d->items) {
      if (name == "items") {
        out.push_back(Value::make_tuple({k, v}));
      } else {
        out.push_back(name == "keys" ? k : v);
      }
    }
    if (name == "items" || name == "keys" || name == "values")
      return Value::make_list(std::move(out));
    return err("unsupported dict method '{}' (templates cannot modify values)", name);
  });
}

}  // namespace

Error undefined_error(const Value& v) {
  return Error{v.s.empty() ? std::string("value is undefined") : v.s};
}

Result<Value> binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = py_str(a) + py_str(b);
    if (s.size() > kMaxStringBytes) return err("string larger than {} bytes", kMaxStringBytes);
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (a.is_number() && b.is_number()) {
    const bool ints = a.is_integral() && b.is_integral();
    const int64_t x = a.as_int(), y = b.as_int();
    const double fx = a.as_double(), fy = b.as_double();
    int64_t r = 0;
    if (op == "+") {
      if (!ints) return Value::number(fx + fy);
      if (__builtin_add_overflow(x, y, &r)) return err("integer overflow in +");
      return Value::integer(r);
    }
    if (op == "-") {
      if (!ints) return Value::number(fx - fy);
      if (__builtin_sub_overflow(x, y, &r)) return err("integer overflow in -");
      return Value::integer(r);
    }
    if (op == "*") {
      if (!ints) return Value::number(fx * fy);
      if (__builtin_mul_overflow(x, y, &r)) return err("integer overflow in *");
      return Value::integer(r);
    }
    if (op == "/") {
      if (fy == 0.0) return err("division by zero");
      return Value::number(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints ? y == 0 : fy == 0.0) return err("integer division or modulo by zero");
      if (ints) {
        if (x == INT64_MIN && y == -1) return err("integer overflow in {}", op);
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::integer(op == "//" ? q : m);
      }
      double m = std::fmod(fx, fy);
      if (m != 0.0 && ((m < 0) != (fy < 0))) m += fy;
      if (op == "%") return Value::number(m);
      double div = (fx - m) / fy;  // Python's float floor division
      if (div == 0.0) return Value::number(std::copysign(0.0, fx / fy));
      double fl = std::floor(div);
      return Value::number(div - fl > 0.5 ? fl + 1.0 : fl);
    }
    if (op == "**") {
      if (ints && y >= 0) return int_pow(x, y);
      if (fx == 0.0 && fy < 0) return err("0.0 cannot be raised to a negative power");
      return Value::number(std::pow(fx, fy));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.s.size() + b.s.size() > kMaxStringBytes)
        return err("string larger than {} bytes", kMaxStringBytes);
      return Value::string(a.s + b.s);
    }
    if (a.is_sequence() && a.kind == b.kind) {
      if (a.list->size() + b.list->size() > kMaxStringBytes / sizeof(Value) ||
          value_bytes(a, kMaxStringBytes) + value_bytes(b, kMaxStringBytes) > kMaxStringBytes)
        return err("list too large");
      ValueList out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return a.kind == Kind::kTuple ? Value::make_tuple(std::move(out))
                                    : Value::make_list(std::move(out));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_sequence()) && b.is_integral())
      return repeat(a.is_string() ? nullptr : a.list.get(), a.is_string() ? &a.s : nullptr,
                    b.as_int(), a.kind);
    if ((b.is_string() || b.is_sequence()) && a.is_integral())
      return repeat(b.is_string() ? nullptr : b.list.get(), b.is_string() ? &b.s : nullptr,
                    a.as_int(), b.kind);
  }
  if (op == "%" && a.is_string()) return err("unsupported: printf-style string formatting (%)");
  return type_error(op, a, b);
}

Result<Value> negate(const Value& v, bool minus) {
  if (v.is_undefined()) return undefined_error(v);
  if (!v.is_number())
    return err("bad operand type for unary {}: '{}'", minus ? '-' : '+', type_name(v));
  if (v.kind == Kind::kFloat) return Value::number(minus ? -v.f : v.f);
  int64_t x = v.as_int();
  if (!minus) return Value::integer(x);
  if (x == INT64_MIN) return err("integer overflow in unary -");
  return Value::integer(-x);
}

Result<bool> contains(const Value& c, const Value& item) {
  switch (c.kind) {
    case Kind::kString:
      if (!item.is_string())
        return err("'in <string>' requires string as left operand, not {}", type_name(item));
      return c.s.find(item.s) != std::string::npos;
    case Kind::kList:
    case Kind::kTuple:
      for (const auto& x : *c.list)
        if (equals(x, item)) return true;
      return false;
    case Kind::kDict:
      return c.dict->find(item) != nullptr;
    case Kind::kUndefined:
      return false;
    default:
      return err("argument of type '{}' is not iterable", type_name(c));
  }
}

Result<Value> get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::kUndefined:
      return undefined_error(obj);
    case Kind::kDict: {
      if (has(kDictMethods, name)) return dict_method(obj, name);
      const Value* v = obj.dict->find(name);
      if (v) return *v;
      return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
    }
    case Kind::kNamespace: {
      const Value* v = obj.dict->find(name);
      if (v) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
    }
    case Kind::kString:
      if (is_str_method(name)) {
        std::string s = obj.s;
        return Value::function("str." + name,
                               [s, name](CallArgs& a) { return call_str_method(s, name, a); });
      }
      break;
    case Kind::kList:
    case Kind::kTuple:
      if (has(kListMethods, name)) {
        return Value::function("list." + name, [name](CallArgs&) -> Result<Value> {
          return err("unsupported list method '{}'", name);
        });
      }
      break;
    default:
      break;
  }
  return Value::undefined(fmt::format("'{}' object has no attribute '{}'", type_name(obj), name));
}

Result<Value> get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Kind::kUndefined:
      return undefined_error(obj);
    case Kind::kDict:
    case Kind::kNamespace: {
      const Value* v = obj.dict->find(key);
      if (v) return *v;
      if (key.is_string()) return get_attr(obj, key.s);
      break;
    }
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kString: {
      if (key.is_string()) return get_attr(obj, key.s);
      if (!key.is_integral()) break;
      int64_t i = key.as_int();
      if (obj.is_string()) {
        auto cps = cp_split(obj.s);
        int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value::string(cps[static_cast<size_t>(i)]);
      } else {
        int64_t n = static_cast<int64_t>(obj.list->size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return (*obj.list)[static_cast<size_t>(i)];
      }
      return Value::undefined(
          fmt::format("{} object has no element {}", type_name(obj), key.as_int()));
    }
    default:
      break;
  }
  return Value::undefined(
      fmt::format("'{}' object has no element {}", type_name(obj), py_repr(key)));
}

Result<Value> get_slice(const Value& obj, const Value& start, const Value& stop,
                        const Value& step) {
  if (obj.is_undefined()) return undefined_error(obj);
  if (!obj.is_string() && !obj.is_sequence())
    return Value::undefined(fmt::format("'{}' object cannot be sliced", type_name(obj)));
  for (const Value* v : {&start, &stop, &step})
    if (!v->is_none() && !v->is_integral())
      return err("slice indices must be integers or None, not {}", type_name(*v));
  std::vector<std::string> cps;
  if (obj.is_string()) cps = cp_split(obj.s);
  const int64_t n =
      obj.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.list->size());
  const int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) return err("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t x = v.as_int();
    if (x < 0) x = x < -n ? (st > 0 ? 0 : -1) : x + n;
    if (x >= n) x = st > 0 ? n : n - 1;
    return x;
  };
  int64_t a = clamp(start, st > 0 ? 0 : n - 1);
  int64_t b = clamp(stop, st > 0 ? n : -1);
  std::string s;
  ValueList items;
  for (int64_t k = a; st > 0 ? k < b : k > b; k += st) {
    if (obj.is_string()) {
      s += cps[static_cast<size_t>(k)];
    } else {
      items.push_back((*obj.list)[static_cast<size_t>(k)]);
    }
  }
  if (obj.is_string()) return Value::string(std::move(s));
  return obj.kind == Kind::kTuple ? Value::make_tuple(std::move(items))
                                  : Value::make_list(std::move(items));
}

Result<ValueList> iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return ValueList{};
    case Kind::kList:
    case Kind::kTuple:
      return *v.list;
    case Kind::kDict: {
      ValueList keys;
      for (const auto& [k, x] : v.dict->items) keys.push_back(k);
      return keys;
    }
    case Kind::kString: {
      ValueList chars;
      for (auto& c : cp_split(v.s)) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    default:
      return err("'{}' object is not iterable", type_name(v));
  }
}

}  // namespace tq::jinja
