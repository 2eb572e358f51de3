// Python str methods on UTF-8 strings: strip, split, startswith, replace, find, join, format...
#include <algorithm>
#include <utility>

#include "base/utf8.h"
#include "text/jinja/builtins.h"

namespace tq::jinja {
namespace {

bool is_ascii_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_ascii_lower(char c) { return c >= 'a' && c <= 'z'; }
char to_upper(char c) { return is_ascii_lower(c) ? static_cast<char>(c - 32) : c; }
char to_lower(char c) { return is_ascii_upper(c) ? static_cast<char>(c + 32) : c; }

// Byte offset -> code point index (Python's str indices).
int64_t cp_index(const std::string& s, size_t byte_pos) {
  return static_cast<int64_t>(cp_count(std::string_view(s).substr(0, byte_pos)));
}

const Value* arg(CallArgs& a, size_t i, std::string_view name) { return a.get(i, name); }

Result<std::string> str_arg(const Value* v, std::string_view what) {
  if (!v || !v->is_string())
    return err("{} must be str, not {}", what, v ? type_name(*v) : "nothing");
  return v->s;
}

Result<int64_t> int_arg(const Value* v, int64_t def, std::string_view what) {
  if (!v || v->is_none()) return def;
  if (!v->is_integral()) return err("{} must be an integer, not {}", what, type_name(*v));
  return v->as_int();
}

// Python str.split / rsplit.
ValueList split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  ValueList out;
  if (!sep || sep->is_none()) {
    auto cps = cp_split(s);
    std::vector<bool> ws(cps.size());
    for (size_t k = 0; k < cps.size(); ++k) {
      size_t p = 0;
      ws[k] = is_py_space(next_code_point_lossy(cps[k], p));
    }
    auto join = [&](size_t a, size_t b) {
      std::string r;
      for (size_t k = a; k < b; ++k) r += cps[k];
      return r;
    };
    const size_t n = cps.size();
    int64_t splits = 0;
    if (!from_right) {
      size_t i = 0;
      while (true) {
        while (i < n && ws[i]) ++i;
        if (i >= n) break;
        if (maxsplit >= 0 && splits == maxsplit) {
          out.push_back(Value::string(join(i, n)));
          break;
        }
        size_t j = i;
        while (j < n && !ws[j]) ++j;
        out.push_back(Value::string(join(i, j)));
        ++splits;
        i = j;
      }
    } else {
      size_t i = n;
      while (true) {
        while (i > 0 && ws[i - 1]) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && splits == maxsplit) {
          out.push_back(Value::string(join(0, i)));
          break;
        }
        size_t j = i;
        while (j > 0 && !ws[j - 1]) --j;
        out.push_back(Value::string(join(j, i)));
        ++splits;
        i = j;
      }
      std::reverse(out.begin(), out.end());
    }
    return out;
  }
  const std::string& d = sep->s;
  std::vector<std::string> parts;
  if (!from_right) {
    size_t start = 0;
    int64_t splits = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      size_t p = s.find(d, start);
      if (p == std::string::npos) break;
      parts.push_back(s.substr(start, p - start));
      start = p + d.size();
      ++splits;
    }
    parts.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    int64_t splits = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      if (end < d.size()) break;
      size_t p = s.rfind(d, end - d.size());
      if (p == std::string::npos) break;
      parts.push_back(s.substr(p + d.size(), end - p - d.size()));
      end = p;
      ++splits;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

Result<bool> affix_match(const std::string& s, const Value* v, bool prefix) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (v && v->is_string()) return one(v->s);
  if (v && v->kind == Kind::kTuple) {
    for (const auto& x : *v->list) {
      if (!x.is_string())
        return err("tuple for {}with must only contain str, not {}", prefix ? "starts" : "ends",
                   type_name(x));
      if (one(x.s)) return true;
    }
    return false;
  }
  return err("{}with first arg must be str or a tuple of str, not {}", prefix ? "starts" : "ends",
             v ? type_name(*v) : "nothing");
}

// str.format with plain fields only: {}, {0}, {name}, {{ and }}.
Result<Value> format(const std::string& s, std::string_view, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    char c = s[k];
    if (c == '}') {
      if (k + 1 < s.size() && s[k + 1] == '}')
        ++k;
      else
        return err("Single '}}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (k + 1 < s.size() && s[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    size_t close = s.find('}', k);
    if (close == std::string::npos) return err("Single '{{' encountered in format string");
    std::string field = s.substr(k + 1, close - k - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      return err("unsupported: format field '{{{}}}' (only {{}}, {{0}} and {{name}})", field);
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < a.pos.size() ? &a.pos[auto_index] : nullptr;
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return d >= '0' && d <= '9'; })) {
      size_t idx = field.size() < 9 ? std::stoul(field) : a.pos.size();
      v = idx < a.pos.size() ? &a.pos[idx] : nullptr;
    } else {
      for (const auto& [name, x] : a.kw)
        if (name == field) v = &x;
    }
    if (!v) return err("format: no argument for field '{{{}}}'", field);
    out += py_str(*v);
    if (out.size() > kMaxStringBytes) return err("string too large");
    k = close;
  }
  return Value::string(std::move(out));
}

}  // namespace

constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
bool is_str_method(std::string_view name) {
  return std::find(std::begin(kStrMethods), std::end(kStrMethods), name) != std::end(kStrMethods);
}

std::string py_strip(std::string_view s, const Value* chars, bool left, bool right) {
  std::vector<char32_t> set;
  bool use_set = chars && chars->is_string();
  if (use_set)
    for (size_t i = 0; i < chars->s.size();) set.push_back(next_code_point_lossy(chars->s, i));
  auto strip_it = [&](char32_t c) {
    return use_set ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t p = begin;
      if (!strip_it(next_code_point_lossy(s, p))) break;
      begin = p;
    }
  }
  if (right) {
    // Walk code points from the front to find the last one to keep.
    size_t keep_end = begin;
    for (size_t p = begin; p < end;) {
      char32_t c = next_code_point_lossy(s, p);
      if (!strip_it(c)) keep_end = p;
    }
    end = keep_end;
  }
  return std::string(s.substr(begin, end - begin));
}

namespace {

using StrMethod = Result<Value> (*)(const std::string& s, std::string_view name, CallArgs& a);

Result<Value> strip(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 1, {}));
  const Value* chars = arg(a, 0, "chars");
  if (chars && !chars->is_string() && !chars->is_none())
    return err("{} arg must be None or str", name);
  return Value::string(py_strip(s, chars, name != "rstrip", name != "lstrip"));
}

Result<Value> split_method(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 2, {"sep", "maxsplit"}));
  const Value* sep = arg(a, 0, "sep");
  if (sep && !sep->is_none() && !sep->is_string()) return err("must be str or None");
  if (sep && sep->is_string() && sep->s.empty()) return err("empty separator");
  TQ_TRY(int64_t maxsplit, int_arg(arg(a, 1, "maxsplit"), -1, "maxsplit"));
  return Value::make_list(split(s, sep, maxsplit, name == "rsplit"));
}

Result<Value> affix(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 1, {}));
  TQ_TRY(bool r, affix_match(s, arg(a, 0, "prefix"), name == "startswith"));
  return Value::boolean(r);
}

Result<Value> replace(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 3, {"old", "new", "count"}));
  TQ_TRY(std::string from, str_arg(arg(a, 0, "old"), "replace() argument 1"));
  TQ_TRY(std::string to, str_arg(arg(a, 1, "new"), "replace() argument 2"));
  TQ_TRY(int64_t count, int_arg(arg(a, 2, "count"), -1, "count"));
  std::string out;
  if (from.empty()) {  // inserts `to` around every character
    auto cps = cp_split(s);
    int64_t done = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (k < cps.size()) out += cps[k];
      if (out.size() > kMaxStringBytes) return err("string too large");
    }
    return Value::string(std::move(out));
  }
  size_t start = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
    if (out.size() > kMaxStringBytes) return err("string too large");
  }
  out.append(s, start);
  return Value::string(std::move(out));
}

// upper, lower, swapcase, title, capitalize: ASCII letters only, as the byte loop walks them.
Result<Value> change_case(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 0, {}));
  std::string out = s;
  bool prev_letter = false;
  for (size_t k = 0; k < out.size(); ++k) {
    char& c = out[k];
    bool letter = is_ascii_upper(c) || is_ascii_lower(c);
    if (name == "upper") c = to_upper(c);
    if (name == "lower") c = to_lower(c);
    if (name == "swapcase") c = is_ascii_upper(c) ? to_lower(c) : to_upper(c);
    if (name == "title") c = prev_letter ? to_lower(c) : to_upper(c);
    if (name == "capitalize") c = k == 0 ? to_upper(c) : to_lower(c);
    prev_letter = letter;
  }
  return Value::string(std::move(out));
}

Result<Value> count(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 1, {}));
  TQ_TRY(std::string sub, str_arg(arg(a, 0, "sub"), "argument"));
  if (sub.empty()) return Value::integer(static_cast<int64_t>(cp_count(s)) + 1);
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return Value::integer(n);
}

// find, rfind, index, rindex: a code point index; index and rindex fail where find gives -1.
Result<Value> find(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 1, {}));
  TQ_TRY(std::string sub, str_arg(arg(a, 0, "sub"), "argument"));
  size_t p = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
  if (p == std::string::npos) {
    if (name == "index" || name == "rindex") return err("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(cp_index(s, p));
}

Result<Value> join(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 1, {}));
  if (a.pos.empty()) return err("join() takes exactly one argument");
  TQ_TRY(ValueList items, iterate(a.pos[0]));
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!items[k].is_string())
      return err("sequence item {}: expected str instance, {} found", k, type_name(items[k]));
    if (k) out += s;
    out += items[k].s;
    if (out.size() > kMaxStringBytes) return err("string too large");
  }
  return Value::string(std::move(out));
}

Result<Value> splitlines(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 1, {"keepends"}));
  const Value* keep = arg(a, 0, "keepends");
  bool keepends = keep && truthy(*keep);
  ValueList out;
  size_t start = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] != '\n' && s[k] != '\r') continue;
    size_t end = k;
    if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
    out.push_back(Value::string(s.substr(start, (keepends ? k + 1 : end) - start)));
    start = k + 1;
  }
  if (start < s.size()) out.push_back(Value::string(s.substr(start)));
  return Value::make_list(std::move(out));
}

Result<Value> remove_affix(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 1, {}));
  TQ_TRY(std::string x, str_arg(arg(a, 0, "affix"), "argument"));
  bool pre = name == "removeprefix";
  if (x.size() <= s.size() &&
      (pre ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
    return Value::string(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
  return Value::string(s);
}

// The is* predicates on ASCII: true when s is non-empty and every byte passes (isascii also
// holds for ""); islower and isupper also need one cased letter.
Result<Value> is_class(const std::string& s, std::string_view name, CallArgs& a) {
  TQ_CHECK_OK(a.check(name, 0, {}));
  bool any_cased = false, ok = !s.empty();
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    bool digit = c >= '0' && c <= '9', alpha = is_ascii_upper(c) || is_ascii_lower(c);
    any_cased = any_cased || alpha;
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") ok = ok && digit;
    if (name == "isalpha") ok = ok && alpha;
    if (name == "isalnum") ok = ok && (alpha || digit);
    if (name == "isspace") ok = ok && (c == ' ' || (c >= '\t' && c <= '\r'));
    if (name == "isascii") ok = ok && u < 0x80;
    if (name == "islower") ok = ok && !is_ascii_upper(c);
    if (name == "isupper") ok = ok && !is_ascii_lower(c);
  }
  if (name == "isascii") ok = ok || s.empty();
  if (name == "islower" || name == "isupper") ok = ok && any_cased;
  return Value::boolean(ok);
}

// Sorted by name for the binary search; the methods of Python's str not here are unsupported.
constexpr std::pair<std::string_view, StrMethod> kImplemented[] = {
    {"capitalize", change_case},
    {"count", count},
    {"endswith", affix},
    {"find", find},
    {"format", format},
    {"index", find},
    {"isalnum", is_class},
    {"isalpha", is_class},
    {"isascii", is_class},
    {"isdecimal", is_class},
    {"isdigit", is_class},
    {"islower", is_class},
    {"isnumeric", is_class},
    {"isspace", is_class},
    {"isupper", is_class},
    {"join", join},
    {"lower", change_case},
    {"lstrip", strip},
    {"removeprefix", remove_affix},
    {"removesuffix", remove_affix},
    {"replace", replace},
    {"rfind", find},
    {"rindex", find},
    {"rsplit", split_method},
    {"rstrip", strip},
    {"split", split_method},
    {"splitlines", splitlines},
    {"startswith", affix},
    {"strip", strip},
    {"swapcase", change_case},
    {"title", change_case},
    {"upper", change_case},
};
static_assert(std::is_sorted(std::begin(kImplemented), std::end(kImplemented),
                             [](const auto& x, const auto& y) { return x.first < y.first; }));

}  // namespace

std::vector<std::string_view> str_method_names() {
  std::vector<std::string_view> out;
  for (const auto& [name, fn] : kImplemented) out.push_back(name);
  return out;
}

Result<Value> call_str_method(const std::string& s, std::string_view name, CallArgs& a) {
  auto it = std::lower_bound(std::begin(kImplemented), std::end(kImplemented), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  if (it == std::end(kImplemented) || it->first != name)
    return err("unsupported string method '{}'", name);
  return it->second(s, name, a);
}

}  // namespace tq::jinja
