// The globals of transformers' chat-template environment: range, namespace, dict,
// raise_exception, strftime_now.
#include <cmath>
#include <ctime>

#include "text/jinja/builtins.h"

namespace tq::jinja {

void add_globals(std::unordered_map<std::string, Value>& g) {
  g["range"] = Value::function("range", [](CallArgs& a) -> Result<Value> {
    TQ_CHECK_OK(a.check("range", 3, {}));
    if (a.pos.empty()) return err("range expected at least 1 argument, got 0");
    for (const auto& x : a.pos)
      if (!x.is_integral())
        return err("'{}' object cannot be interpreted as an integer", type_name(x));
    int64_t start = 0, stop = 0, step = 1;
    if (a.pos.size() == 1) {
      stop = a.pos[0].as_int();
    } else {
      start = a.pos[0].as_int();
      stop = a.pos[1].as_int();
      if (a.pos.size() == 3) step = a.pos[2].as_int();
    }
    if (step == 0) return err("range() arg 3 must not be zero");
    // jinja2's sandbox refuses ranges longer than MAX_RANGE (100000).
    double len = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                           static_cast<double>(step));
    if (len > 100000)
      return err("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    ValueList out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
      out.push_back(Value::integer(k));
    return Value::make_list(std::move(out));
  });
  auto make_mapping = [](CallArgs& a, Value d) -> Result<Value> {
    if (a.pos.size() > 1) return err("expected at most 1 positional argument");
    if (!a.pos.empty()) {
      if (a.pos[0].is_mapping()) {
        for (const auto& [k, v] : a.pos[0].dict->items) d.dict->set(k, v);
      } else {
        TQ_TRY(ValueList pairs, iterate(a.pos[0]));
        for (const auto& p : pairs) {
          if (!p.is_sequence() || p.list->size() != 2)
            return err("dictionary update sequence element has wrong length");
          d.dict->set((*p.list)[0], (*p.list)[1]);
        }
      }
    }
    for (const auto& [k, v] : a.kw) d.dict->set(Value::string(k), v);
    return d;
  };
  g["namespace"] = Value::function("namespace", [make_mapping](CallArgs& a) -> Result<Value> {
    TQ_TRY(Value ns, make_mapping(a, Value::make_namespace()));
    for (const auto& [k, v] : ns.dict->items)
      if (k.is_string() && !k.s.empty() && k.s[0] == '_')
        return err("chat templates cannot store underscore-prefixed attributes on a namespace");
    return ns;
  });
  g["dict"] = Value::function(
      "dict", [make_mapping](CallArgs& a) { return make_mapping(a, Value::make_dict()); });
  g["raise_exception"] = Value::function("raise_exception", [](CallArgs& a) -> Result<Value> {
    return err("raise_exception: {}", a.pos.empty() ? std::string() : py_str(a.pos[0]));
  });
  g["strftime_now"] = Value::function("strftime_now", [](CallArgs& a) -> Result<Value> {
    if (a.pos.size() != 1 || !a.pos[0].is_string())
      return err("strftime_now(format) takes one string");
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[512];
    size_t n = std::strftime(buf, sizeof(buf), a.pos[0].s.c_str(), &tm);
    return Value::string(std::string(buf, n));
  });
}

}  // namespace tq::jinja
