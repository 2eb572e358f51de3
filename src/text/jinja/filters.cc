// Jinja filters: a name -> function table, one small function per filter.
#include <algorithm>
#include <cmath>
#include <utility>

#include "text/jinja/builtins.h"

namespace tq::jinja {
namespace {

Result<int64_t> length_of(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(cp_count(v.s));
    case Kind::kList:
    case Kind::kTuple:
      return static_cast<int64_t>(v.list->size());
    case Kind::kDict:
      return static_cast<int64_t>(v.dict->items.size());
    default:
      return err("object of type '{}' has no len()", type_name(v));
  }
}

// jinja2's attribute getter: "a.b.0" walks attributes/items.
Result<Value> attr_path(const Value& item, const Value& path) {
  if (path.is_integral()) return get_item(item, path);
  std::string p = py_str(path);
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return c >= '0' && c <= '9'; });
    if (digits && part.size() < 18) {
      TQ_TRY(cur, get_item(cur, Value::integer(std::stoll(part))));
    } else {
      TQ_TRY(cur, get_item(cur, Value::string(part)));
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Python int(str): optional sign, digits with single underscores, surrounding whitespace.
bool parse_int(std::string s, int64_t* out) {
  s = py_strip(s, nullptr, true, true);
  size_t k = 0;
  bool neg = false;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
  if (k >= s.size()) return false;
  int64_t v = 0;
  bool prev_digit = false;
  for (; k < s.size(); ++k) {
    if (s[k] == '_' && prev_digit && k + 1 < s.size()) {
      prev_digit = false;
      continue;
    }
    if (s[k] < '0' || s[k] > '9') return false;
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[k] - '0', &v))
      return false;
    prev_digit = true;
  }
  *out = neg ? -v : v;
  return prev_digit;
}

bool parse_float(const std::string& s, double* out) {
  std::string t = py_strip(s, nullptr, true, true);
  if (t.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

// Sort key comparison for sort/unique/min/max: strings compare lowercased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!v.is_string() || case_sensitive) return v;
  std::string s = v.s;
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  return Value::string(std::move(s));
}

Result<ValueList> keyed(const ValueList& items, const Value* attribute, bool case_sensitive) {
  ValueList keys;
  for (const auto& it : items) {
    Value k = it;
    if (attribute && !attribute->is_none()) {
      TQ_TRY(k, attr_path(it, *attribute));
    }
    keys.push_back(sort_key(k, case_sensitive));
  }
  return keys;
}

// select, reject, selectattr, rejectattr.
Result<Value> select(std::string_view name, const Value& v, CallArgs& a) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_if = name == "select" || name == "selectattr";
  if (!truthy(v)) return Value::make_list();  // jinja2 tests `if seq` first: none is empty
  TQ_TRY(ValueList items, iterate(v));
  size_t first = 0;
  Value attr;
  if (by_attr) {
    if (a.pos.empty()) return err("{} needs an attribute name", name);
    attr = a.pos[0];
    first = 1;
  }
  std::string test = a.pos.size() > first ? py_str(a.pos[first]) : "";
  CallArgs rest;
  for (size_t k = first + 1; k < a.pos.size(); ++k) rest.pos.push_back(a.pos[k]);
  rest.kw = a.kw;
  ValueList out;
  for (const auto& it : items) {
    Value x = it;
    if (by_attr) {
      TQ_TRY(x, attr_path(it, attr));
    }
    bool r;
    if (test.empty()) {
      r = truthy(x);
    } else {
      CallArgs copy = rest;
      TQ_TRY(r, call_test(test, x, copy));
    }
    if (r == keep_if) out.push_back(it);
  }
  return Value::make_list(std::move(out));
}

Result<Value> tojson(std::string_view, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions o;
  if (const Value* x = a.get(0, "ensure_ascii")) o.ensure_ascii = truthy(*x);
  if (const Value* x = a.get(1, "indent"); x && !x->is_none()) {
    if (x->is_string()) {
      o.indent_is_str = true;
      o.indent_str = x->s;
    } else if (x->is_integral()) {
      o.indent = std::clamp<int64_t>(x->as_int(), 0, 1024);
    } else {
      return err("tojson: indent must be an int or a string, not {}", type_name(*x));
    }
  }
  if (const Value* x = a.get(2, "separators"); x && !x->is_none()) {
    if (!x->is_sequence() || x->list->size() != 2 || !(*x->list)[0].is_string() ||
        !(*x->list)[1].is_string())
      return err("tojson: separators must be a pair of strings");
    o.item_sep = (*x->list)[0].s;
    o.key_sep = (*x->list)[1].s;
    o.has_separators = true;
  }
  if (const Value* x = a.get(3, "sort_keys")) o.sort_keys = truthy(*x);
  TQ_TRY(std::string s, to_json_text(v, o));
  return Value::string(std::move(s));
}

Result<Value> indent(std::string_view, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check("indent", 3, {"width", "first", "blank"}));
  std::string ind(4, ' ');
  if (const Value* w = a.get(0, "width")) {
    if (w->is_string()) {
      ind = w->s;
    } else if (w->is_integral()) {
      ind = std::string(static_cast<size_t>(std::clamp<int64_t>(w->as_int(), 0, 1024)), ' ');
    }
  }
  const Value* f = a.get(1, "first");
  const Value* b = a.get(2, "blank");
  CallArgs none;
  TQ_TRY(Value lines_v, call_str_method(py_str(v) + "\n", "splitlines", none));
  const ValueList& lines = *lines_v.list;
  std::string out;
  if (b && truthy(*b)) {
    for (size_t k = 0; k < lines.size() && out.size() <= kMaxStringBytes; ++k)
      out += (k ? "\n" + ind : "") + lines[k].s;
  } else {
    out = lines.empty() ? "" : lines[0].s;
    for (size_t k = 1; k < lines.size() && out.size() <= kMaxStringBytes; ++k)
      out += "\n" + (lines[k].s.empty() ? "" : ind + lines[k].s);
  }
  if (f && truthy(*f)) out = ind + out;
  if (out.size() > kMaxStringBytes) return err("string too large");
  return Value::string(std::move(out));
}

// One function per filter; `name` tells aliases apart and names the filter in errors.
using Filter = Result<Value> (*)(std::string_view name, const Value& v, CallArgs& a);

Result<Value> length(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 0, {}));
  TQ_TRY(int64_t n, length_of(v));
  return Value::integer(n);
}

Result<Value> trim(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 1, {"chars"}));
  return Value::string(py_strip(py_str(v), a.get(0, "chars"), true, true));
}

Result<Value> string(std::string_view, const Value& v, CallArgs&) {
  return Value::string(py_str(v));
}

Result<Value> safe(std::string_view, const Value& v, CallArgs&) { return v; }

Result<Value> escape(std::string_view, const Value& v, CallArgs&) {
  return Value::string(html_escape(py_str(v)));
}

Result<Value> default_value(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 2, {"default_value", "boolean"}));
  const Value* def = a.get(0, "default_value");
  const Value* boolean = a.get(1, "boolean");
  bool use = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
  if (!use) return v;
  return def ? *def : Value::string("");
}

Result<Value> join(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 2, {"d", "attribute"}));
  const Value* d = a.get(0, "d");
  const Value* attr = a.get(1, "attribute");
  TQ_TRY(ValueList items, iterate(v));
  std::string sep = d ? py_str(*d) : "", out;
  for (size_t k = 0; k < items.size(); ++k) {
    Value x = items[k];
    if (attr && !attr->is_none()) {
      TQ_TRY(x, attr_path(x, *attr));
    }
    if (k) out += sep;
    out += py_str(x);
    if (out.size() > kMaxStringBytes) return err("string too large");
  }
  return Value::string(std::move(out));
}

// upper, lower, capitalize, title, replace: the str method of the value's str().
Result<Value> str_method(std::string_view name, const Value& v, CallArgs& a) {
  return call_str_method(py_str(v), name, a);
}

Result<Value> first_last(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 0, {}));
  if (v.is_undefined()) return undefined_error(v);
  TQ_TRY(ValueList items, iterate(v));
  if (items.empty()) return Value::undefined(fmt::format("No {} item, sequence was empty.", name));
  return name == "first" ? items.front() : items.back();
}

Result<Value> list(std::string_view, const Value& v, CallArgs&) {
  TQ_TRY(ValueList items, iterate(v));
  return Value::make_list(std::move(items));
}

Result<Value> items(std::string_view, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::make_list();
  if (!v.is_mapping()) return err("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_tuple({k, x}));
  return Value::make_list(std::move(out));
}

Result<Value> reverse(std::string_view, const Value& v, CallArgs&) {
  if (v.is_string()) return get_slice(v, Value::none(), Value::none(), Value::integer(-1));
  TQ_TRY(ValueList items, iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}

Result<Value> map(std::string_view, const Value& v, CallArgs& a) {
  if (!truthy(v)) return Value::make_list();
  TQ_TRY(ValueList items, iterate(v));
  ValueList out;
  const Value* attr = nullptr;
  for (const auto& [k, x] : a.kw)
    if (k == "attribute") attr = &x;
  if (attr) {
    const Value* def = nullptr;
    for (const auto& [k, x] : a.kw)
      if (k == "default") def = &x;
    for (const auto& it : items) {
      TQ_TRY(Value x, attr_path(it, *attr));
      out.push_back(x.is_undefined() && def ? *def : x);
    }
  } else {
    if (a.pos.empty()) return err("map requires a filter argument");
    std::string f = py_str(a.pos[0]);
    for (const auto& it : items) {
      CallArgs rest;
      rest.pos.assign(a.pos.begin() + 1, a.pos.end());
      rest.kw = a.kw;
      TQ_TRY(Value x, call_filter(f, it, rest));
      out.push_back(std::move(x));
    }
  }
  return Value::make_list(std::move(out));
}

// int and float: Python's int()/float() of numbers and strings, else the default.
Result<Value> to_number(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 2, {"default", "base"}));
  const Value* def = a.get(0, "default");
  bool is_int = name == "int";
  Value fallback = def ? *def : is_int ? Value::integer(0) : Value::number(0.0);
  int64_t i = 0;
  double f = 0.0;
  if (v.is_number()) {
    if (!is_int) return Value::number(v.as_double());
    if (v.is_integral()) return Value::integer(v.as_int());
    if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(v.f));
  }
  if (!v.is_string()) return fallback;
  if (is_int && parse_int(v.s, &i)) return Value::integer(i);
  if (!parse_float(v.s, &f)) return fallback;
  if (!is_int) return Value::number(f);
  if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
  return Value::integer(static_cast<int64_t>(f));
}

Result<Value> abs(std::string_view, const Value& v, CallArgs&) {
  if (!v.is_number()) return err("bad operand type for abs(): '{}'", type_name(v));
  if (v.kind == Kind::kFloat) return Value::number(std::fabs(v.f));
  if (v.as_int() == INT64_MIN) return err("integer overflow in abs");
  return Value::integer(std::llabs(v.as_int()));
}

Result<Value> round(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 2, {"precision", "method"}));
  if (!v.is_number()) return err("round: expected a number, got {}", type_name(v));
  const Value* p = a.get(0, "precision");
  const Value* m = a.get(1, "method");
  int64_t prec = p && p->is_integral() ? std::clamp<int64_t>(p->as_int(), -300, 300) : 0;
  std::string method = m ? py_str(*m) : "common";
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_double() * scale;
  if (method == "common") {
    x = std::round(x);
  } else if (method == "ceil") {
    x = std::ceil(x);
  } else if (method == "floor") {
    x = std::floor(x);
  } else {
    return err("method must be common, ceil or floor");
  }
  return Value::number(x / scale);
}

// Orders indices by their keys; the first unorderable pair lands in `failed`.
auto key_less(const ValueList& keys, Status& failed) {
  return [&keys, &failed](size_t x, size_t y) {
    auto r = less_than(keys[x], keys[y]);
    if (!r) failed = r.error();
    return r.ok() && *r;
  };
}

Result<Value> sort(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 3, {"reverse", "case_sensitive", "attribute"}));
  const Value* rev = a.get(0, "reverse");
  const Value* cs = a.get(1, "case_sensitive");
  const Value* attr = a.get(2, "attribute");
  TQ_TRY(ValueList items, iterate(v));
  TQ_TRY(ValueList keys, keyed(items, attr, cs && truthy(*cs)));
  std::vector<size_t> idx(items.size());
  for (size_t k = 0; k < idx.size(); ++k) idx[k] = k;
  Status failed;
  std::stable_sort(idx.begin(), idx.end(), key_less(keys, failed));
  if (!failed) return failed.error();
  if (rev && truthy(*rev)) std::reverse(idx.begin(), idx.end());
  ValueList out;
  for (size_t k : idx) out.push_back(items[k]);
  return Value::make_list(std::move(out));
}

Result<Value> unique(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 2, {"case_sensitive", "attribute"}));
  const Value* cs = a.get(0, "case_sensitive");
  const Value* attr = a.get(1, "attribute");
  TQ_TRY(ValueList items, iterate(v));
  TQ_TRY(ValueList keys, keyed(items, attr, cs && truthy(*cs)));
  ValueList out, seen;
  for (size_t k = 0; k < items.size(); ++k) {
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, keys[k]); }))
      continue;
    seen.push_back(keys[k]);
    out.push_back(items[k]);
  }
  return Value::make_list(std::move(out));
}

Result<Value> min_max(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 2, {"case_sensitive", "attribute"}));
  const Value* cs = a.get(0, "case_sensitive");
  const Value* attr = a.get(1, "attribute");
  TQ_TRY(ValueList items, iterate(v));
  TQ_TRY(ValueList keys, keyed(items, attr, cs && truthy(*cs)));
  if (items.empty()) return Value::undefined(fmt::format("No {} item, sequence was empty.", name));
  Status failed;
  auto less = key_less(keys, failed);
  size_t best = 0;
  for (size_t k = 1; k < items.size(); ++k)
    if (name == "min" ? less(k, best) : less(best, k)) best = k;
  if (!failed) return failed.error();
  return items[best];
}

Result<Value> dictsort(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 3, {"case_sensitive", "by", "reverse"}));
  if (!v.is_mapping()) return err("dictsort: expected a mapping, got {}", type_name(v));
  const Value* cs = a.get(0, "case_sensitive");
  const Value* by = a.get(1, "by");
  const Value* rev = a.get(2, "reverse");
  size_t pos = 0;
  if (by && py_str(*by) == "value") {
    pos = 1;
  } else if (by && py_str(*by) != "key") {
    return err("You can only sort by either \"key\" or \"value\"");
  }
  ValueList pairs;
  for (const auto& [k, x] : v.dict->items) pairs.push_back(Value::make_tuple({k, x}));
  Status failed;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    auto r = less_than(sort_key((*x.list)[pos], cs && truthy(*cs)),
                       sort_key((*y.list)[pos], cs && truthy(*cs)));
    if (!r) failed = r.error();
    return r.ok() && *r;
  });
  if (!failed) return failed.error();
  if (rev && truthy(*rev)) std::reverse(pairs.begin(), pairs.end());
  return Value::make_list(std::move(pairs));
}

Result<Value> sum(std::string_view name, const Value& v, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 2, {"attribute", "start"}));
  const Value* attr = a.get(0, "attribute");
  const Value* start = a.get(1, "start");
  TQ_TRY(ValueList items, iterate(v));
  Value total = start ? *start : Value::integer(0);
  for (const auto& it : items) {
    Value x = it;
    if (attr && !attr->is_none()) {
      TQ_TRY(x, attr_path(it, *attr));
    }
    TQ_TRY(total, binary_op("+", total, x));
  }
  return total;
}

// Sorted by name for the binary search.
constexpr std::pair<std::string_view, Filter> kFilters[] = {
    {"abs", abs},
    {"capitalize", str_method},
    {"count", length},
    {"d", default_value},
    {"default", default_value},
    {"dictsort", dictsort},
    {"e", escape},
    {"escape", escape},
    {"first", first_last},
    {"float", to_number},
    {"forceescape", escape},
    {"indent", indent},
    {"int", to_number},
    {"items", items},
    {"join", join},
    {"last", first_last},
    {"length", length},
    {"list", list},
    {"lower", str_method},
    {"map", map},
    {"max", min_max},
    {"min", min_max},
    {"reject", select},
    {"rejectattr", select},
    {"replace", str_method},
    {"reverse", reverse},
    {"round", round},
    {"safe", safe},
    {"select", select},
    {"selectattr", select},
    {"sort", sort},
    {"string", string},
    {"sum", sum},
    {"title", str_method},
    {"tojson", tojson},
    {"trim", trim},
    {"unique", unique},
    {"upper", str_method},
};
static_assert(std::is_sorted(std::begin(kFilters), std::end(kFilters),
                             [](const auto& x, const auto& y) { return x.first < y.first; }));

constexpr std::string_view kUnsupportedFilters[] = {
    "attr",   "batch",     "center",   "filesizeformat", "format",   "groupby",
    "pprint", "random",    "slice",    "striptags",      "truncate", "urlencode",
    "urlize", "wordcount", "wordwrap", "xmlattr"};

}  // namespace

std::vector<std::string_view> filter_names() {
  std::vector<std::string_view> out;
  for (const auto& [name, fn] : kFilters) out.push_back(name);
  return out;
}

Result<Value> call_filter(std::string_view name, const Value& v, CallArgs& a) {
  auto it = std::lower_bound(std::begin(kFilters), std::end(kFilters), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  if (it != std::end(kFilters) && it->first == name) return it->second(name, v, a);
  for (auto u : kUnsupportedFilters)
    if (name == u) return err("unsupported filter '{}'", name);
  return err("no filter named '{}'", name);
}

}  // namespace tq::jinja
