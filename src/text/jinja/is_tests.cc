// Jinja tests (`x is defined`, `x is divisibleby 3`, ...).
#include "text/jinja/builtins.h"

namespace tq::jinja {

Result<bool> call_test(std::string_view name, const Value& v, CallArgs& a) {
  const Value* arg = a.pos.empty() ? nullptr : &a.pos[0];
  auto need_arg = [&]() -> Status {
    if (!arg) return err("test '{}' needs an argument", name);
    return ok_status();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "mapping") return v.is_mapping();
  if (name == "iterable")
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
  if (name == "sequence")
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
  if (name == "callable") return v.kind == Kind::kFunction;
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    CallArgs none;
    TQ_TRY(Value r, call_str_method(py_str(v), name == "lower" ? "islower" : "isupper", none));
    return r.b;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_integral()) return err("test '{}' expects an integer, got {}", name, type_name(v));
    int64_t d = 2;
    if (name == "divisibleby") {
      TQ_CHECK_OK(need_arg());
      if (!arg->is_integral() || arg->as_int() == 0) return err("divisibleby needs a nonzero int");
      d = arg->as_int();
    }
    int64_t m = d == -1 ? 0 : v.as_int() % d;
    return name == "odd" ? m != 0 : m == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    TQ_CHECK_OK(need_arg());
    bool e = equals(v, *arg);
    return name == "ne" || name == "!=" ? !e : e;
  }
  if (name == "lt" || name == "lessthan" || name == "<" || name == "ge" || name == ">=") {
    TQ_CHECK_OK(need_arg());
    TQ_TRY(bool r, less_than(v, *arg));
    return name == "ge" || name == ">=" ? !r : r;
  }
  if (name == "gt" || name == "greaterthan" || name == ">" || name == "le" || name == "<=") {
    TQ_CHECK_OK(need_arg());
    TQ_TRY(bool r, less_than(*arg, v));
    return name == "le" || name == "<=" ? !r : r;
  }
  if (name == "in") {
    TQ_CHECK_OK(need_arg());
    return contains(*arg, v);
  }
  if (name == "sameas") {
    TQ_CHECK_OK(need_arg());
    if (v.kind != arg->kind) return false;
    if (v.is_sequence()) return v.list == arg->list;
    if (v.kind == Kind::kDict || v.kind == Kind::kNamespace) return v.dict == arg->dict;
    return equals(v, *arg);
  }
  return err("no test named '{}'", name);
}

}  // namespace tq::jinja
