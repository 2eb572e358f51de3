#include "text/jinja/eval.h"

#include <unordered_map>

#include "text/jinja/builtins.h"

namespace tq::jinja {
namespace {

constexpr int kMaxMacroDepth = 64;

using Frame = std::unordered_map<std::string, Value>;

// Prefixes the expression's position unless an inner node already did.
Error located(int line, int col, const Error& e) {
  if (e.message.rfind("line ", 0) == 0) return e;
  return err("line {} col {}: {}", line, col, e.message);
}
template <typename N>
Error located(const N& n, const Error& e) {
  return located(n.line, n.col, e);
}

class Renderer {
 public:
  explicit Renderer(const RenderLimits& limits) : limits_(limits) {}

  Result<std::string> run(const Body& body,
                          const std::vector<std::pair<std::string, Value>>& vars) {
    frames_.emplace_back();
    add_globals(frames_.back());
    frames_.emplace_back();
    for (const auto& [k, v] : vars) frames_.back()[k] = v;
    TQ_TRY(Flow f, exec(body));
    if (f != Flow::kNormal) return err("'break' or 'continue' outside a for loop");
    return std::move(out_);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Status step(const Stmt& s) {
    if (++steps_ > limits_.max_steps)
      return located(s, err("template ran more than {} steps", limits_.max_steps));
    return ok_status();
  }

  Status emit(std::string_view text, const Stmt& s) {
    if (out_.size() + text.size() > limits_.max_output_bytes)
      return located(s, err("output larger than {} bytes", limits_.max_output_bytes));
    TQ_CHECK_OK(charge_bytes(text.size(), s));
    out_ += text;
    return ok_status();
  }

  template <typename N>
  Status charge_bytes(size_t bytes, const N& at) {
    if (bytes > limits_.max_work_bytes - work_)
      return located(at, err("template made more than {} bytes of values (work limit)",
                             limits_.max_work_bytes));
    work_ += bytes;
    return ok_status();
  }

  // A string is copied wherever it goes; a list or dict is shared, so only `deep` (a new value,
  // or one a loop or comparison walks) charges its elements.
  template <typename N>
  Status charge(const Value& v, bool deep, const N& at) {
    if (!deep || (!v.list && !v.dict)) return charge_bytes(v.s.size(), at);
    return charge_bytes(value_bytes(v, limits_.max_work_bytes - work_), at);
  }

  Result<Flow> exec(const Body& body) {
    for (const auto& s : body) {
      TQ_TRY(Flow f, exec(*s));
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Result<Flow> exec(const Stmt& s) {
    TQ_CHECK_OK(step(s));
    switch (s.kind) {
      case StmtKind::kText:
        TQ_CHECK_OK(emit(s.text, s));
        break;
      case StmtKind::kOutput: {
        TQ_TRY(Value v, eval(*s.expr));
        TQ_CHECK_OK(emit(py_str(v), s));
        break;
      }
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches) {
          TQ_TRY(Value c, eval(*cond));
          if (truthy(c)) return exec(body);
        }
        return exec(s.else_body);
      case StmtKind::kFor:
        return exec_for(s);
      case StmtKind::kSet: {
        TQ_TRY(Value v, eval(*s.expr));
        TQ_CHECK_OK(assign(s, std::move(v)));
        break;
      }
      case StmtKind::kSetBlock: {
        std::string saved;
        std::swap(saved, out_);
        TQ_TRY(Flow f, exec(s.body));
        std::swap(saved, out_);
        if (f != Flow::kNormal) return f;
        Value v = Value::string(std::move(saved));
        if (s.expr) {
          TQ_TRY(v, apply_filters(*s.expr, std::move(v)));
          TQ_CHECK_OK(charge(v, true, s));
        }
        TQ_CHECK_OK(assign(s, std::move(v)));
        break;
      }
      case StmtKind::kMacro:
        define_macro(s);
        break;
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        return exec(s.body);
    }
    return Flow::kNormal;
  }

  Status bind(const std::vector<ExprPtr>& targets, Value v, Frame& frame, const Stmt& s) {
    if (targets.size() == 1) {
      frame[targets[0]->name] = std::move(v);
      return ok_status();
    }
    if (!v.is_sequence()) return located(s, err("cannot unpack non-sequence {}", type_name(v)));
    if (v.list->size() != targets.size())
      return located(s,
                     err("expected {} values to unpack, got {}", targets.size(), v.list->size()));
    for (size_t k = 0; k < targets.size(); ++k) frame[targets[k]->name] = (*v.list)[k];
    return ok_status();
  }

  Status assign(const Stmt& s, Value v) {
    const Expr& t = *s.targets[0];
    if (t.kind == ExprKind::kAttr) {  // set ns.attr = v
      Value ns = lookup(t.args[0]->name);
      if (ns.kind != Kind::kNamespace)
        return located(t, err("cannot assign attribute '{}' on '{}' ({}): only namespace() "
                              "objects take attribute assignments",
                              t.name, t.args[0]->name, type_name(ns)));
      ns.dict->set(Value::string(t.name), std::move(v));
      return ok_status();
    }
    return bind(s.targets, std::move(v), frames_.back(), s);
  }

  Result<Flow> exec_for(const Stmt& s) {
    TQ_TRY(Value seq, eval(*s.expr));
    TQ_CHECK_OK(charge(seq, true, *s.expr));  // the loop copies its items
    auto items_r = iterate(seq);
    if (!items_r) return located(*s.expr, items_r.error());
    ValueList items = std::move(items_r).value();
    if (s.cond) {  // loop filter: `for x in xs if cond`
      ValueList kept;
      for (auto& it : items) {
        frames_.emplace_back();
        TQ_CHECK_OK(bind(s.targets, it, frames_.back(), s));
        auto c = eval(*s.cond);
        frames_.pop_back();
        if (!c) return c.error();
        if (truthy(*c)) kept.push_back(std::move(it));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body);
    const auto n = static_cast<int64_t>(items.size());
    Value cycle_src = Value::make_list();
    for (int64_t k = 0; k < n; ++k) {
      TQ_CHECK_OK(step(s));
      frames_.emplace_back();
      Frame& f = frames_.back();
      TQ_CHECK_OK(bind(s.targets, items[static_cast<size_t>(k)], f, s));
      Value loop = Value::make_dict();
      auto put = [&](const char* key, Value v) {
        loop.dict->items.emplace_back(Value::string(key), std::move(v));
      };
      put("index", Value::integer(k + 1));
      put("index0", Value::integer(k));
      put("revindex", Value::integer(n - k));
      put("revindex0", Value::integer(n - k - 1));
      put("first", Value::boolean(k == 0));
      put("last", Value::boolean(k == n - 1));
      put("length", Value::integer(n));
      put("depth", Value::integer(1));
      put("depth0", Value::integer(0));
      put("previtem", k > 0 ? items[static_cast<size_t>(k - 1)]
                            : Value::undefined("there is no previous item"));
      put("nextitem", k + 1 < n ? items[static_cast<size_t>(k + 1)]
                                : Value::undefined("there is no next item"));
      put("cycle", Value::function("loop.cycle", [k](CallArgs& a) -> Result<Value> {
            if (a.pos.empty()) return err("no items for cycling given");
            return a.pos[static_cast<size_t>(k) % a.pos.size()];
          }));
      f["loop"] = std::move(loop);
      auto r = exec(s.body);
      frames_.pop_back();
      if (!r) return r.error();
      if (*r == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void define_macro(const Stmt& s) {
    const Stmt* m = &s;
    frames_.back()[s.text] =
        Value::function(s.text, [this, m](CallArgs& a) { return call_macro(*m, a); });
  }

  Result<Value> call_macro(const Stmt& m, CallArgs& a) {
    if (a.pos.size() > m.params.size())
      return err("macro '{}' takes {} arguments ({} given)", m.text, m.params.size(), a.pos.size());
    if (macro_depth_ >= kMaxMacroDepth)
      return err("macro calls nested deeper than {}", kMaxMacroDepth);
    Frame params;
    for (size_t k = 0; k < m.params.size(); ++k) {
      const auto& [name, def] = m.params[k];
      const Value* given = a.get(k, name);
      if (given) {
        params[name] = *given;
      } else if (def) {
        TQ_TRY(params[name], eval(*def));
      } else {
        params[name] = Value::undefined(fmt::format("'{}' was not provided", name));
      }
    }
    for (const auto& [k, v] : a.kw) {
      bool known = false;
      for (const auto& p : m.params) known = known || p.first == k;
      if (!known) return err("macro '{}' has no argument '{}'", m.text, k);
    }
    // The body sees its arguments, the template's top level and the globals.
    std::vector<Frame> saved(std::make_move_iterator(frames_.begin() + 2),
                             std::make_move_iterator(frames_.end()));
    frames_.resize(2);
    frames_.push_back(std::move(params));
    std::string saved_out;
    std::swap(saved_out, out_);
    ++macro_depth_;
    auto r = exec(m.body);
    --macro_depth_;
    std::swap(saved_out, out_);
    frames_.resize(2);
    for (auto& f : saved) frames_.push_back(std::move(f));
    if (!r) return r.error();
    return Value::string(std::move(saved_out));
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  Status eval_args(const Expr& e, size_t first, CallArgs& a) {
    for (size_t k = first; k < e.args.size(); ++k) {
      TQ_TRY(Value v, eval(*e.args[k]));
      a.pos.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.kwargs) {
      TQ_TRY(Value v, eval(*x));
      a.kw.emplace_back(k, std::move(v));
    }
    return ok_status();
  }

  // Applies a chain of filters whose innermost operand is missing (set blocks).
  Result<Value> apply_filters(const Expr& f, Value v) {
    if (f.args[0]) {
      TQ_TRY(v, apply_filters(*f.args[0], std::move(v)));
    }
    CallArgs a;
    TQ_CHECK_OK(eval_args(f, 1, a));
    auto r = call_filter(f.name, v, a);
    if (!r) return located(f, r.error());
    return r;
  }

  template <typename T>
  Result<T> at(const Expr& e, Result<T> r) {
    if (!r) return located(e, r.error());
    return r;
  }

  Result<Value> eval(const Expr& e) {
    TQ_TRY(Value v, eval_expr(e));
    const bool lookup =
        e.kind == ExprKind::kName || e.kind == ExprKind::kAttr || e.kind == ExprKind::kItem;
    TQ_CHECK_OK(charge(v, !lookup, e));
    return v;
  }

  Result<Value> eval_expr(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName:
        return lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        ValueList items;
        for (const auto& a : e.args) {
          TQ_TRY(Value v, eval(*a));
          items.push_back(std::move(v));
        }
        return e.kind == ExprKind::kList ? Value::make_list(std::move(items))
                                         : Value::make_tuple(std::move(items));
      }
      case ExprKind::kDict: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          TQ_TRY(Value key, eval(*e.args[k]));
          TQ_TRY(Value v, eval(*e.args[k + 1]));
          d.dict->set(std::move(key), std::move(v));
        }
        return d;
      }
      case ExprKind::kAttr: {
        TQ_TRY(Value obj, eval(*e.args[0]));
        return at(e, get_attr(obj, e.name));
      }
      case ExprKind::kItem: {
        TQ_TRY(Value obj, eval(*e.args[0]));
        TQ_TRY(Value key, eval(*e.args[1]));
        return at(e, get_item(obj, key));
      }
      case ExprKind::kSlice: {
        if (!e.args[0]) return located(e, err("a slice needs an object to slice"));
        TQ_TRY(Value obj, eval(*e.args[0]));
        Value parts[3] = {Value::none(), Value::none(), Value::none()};
        for (int k = 0; k < 3; ++k) {
          if (e.args[k + 1]) {
            TQ_TRY(parts[k], eval(*e.args[k + 1]));
          }
        }
        return at(e, get_slice(obj, parts[0], parts[1], parts[2]));
      }
      case ExprKind::kCall: {
        TQ_TRY(Value fn, eval(*e.args[0]));
        if (fn.is_undefined()) return located(e, undefined_error(fn));
        if (fn.kind != Kind::kFunction)
          return located(e, err("'{}' object is not callable", type_name(fn)));
        CallArgs a;
        TQ_CHECK_OK(eval_args(e, 1, a));
        return at(e, fn.fn->call(a));
      }
      case ExprKind::kFilter: {
        TQ_TRY(Value v, eval(*e.args[0]));
        CallArgs a;
        TQ_CHECK_OK(eval_args(e, 1, a));
        return at(e, call_filter(e.name, v, a));
      }
      case ExprKind::kTest: {
        TQ_TRY(Value v, eval(*e.args[0]));
        CallArgs a;
        TQ_CHECK_OK(eval_args(e, 1, a));
        TQ_TRY(bool r, at(e, call_test(e.name, v, a)));
        return Value::boolean(r != e.negated);
      }
      case ExprKind::kNot: {
        TQ_TRY(Value v, eval(*e.args[0]));
        return Value::boolean(!truthy(v));
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        TQ_TRY(Value v, eval(*e.args[0]));
        return at(e, negate(v, e.kind == ExprKind::kNeg));
      }
      case ExprKind::kBinary: {
        TQ_TRY(Value a, eval(*e.args[0]));
        TQ_TRY(Value b, eval(*e.args[1]));
        return at(e, binary_op(e.name, a, b));
      }
      case ExprKind::kAnd:
      case ExprKind::kOr: {  // Python returns the deciding operand
        TQ_TRY(Value a, eval(*e.args[0]));
        if (truthy(a) == (e.kind == ExprKind::kOr)) return a;
        return eval(*e.args[1]);
      }
      case ExprKind::kCompare: {
        TQ_TRY(Value left, eval(*e.args[0]));
        TQ_CHECK_OK(charge(left, true, e));  // comparisons walk lists and dicts
        for (size_t k = 0; k < e.ops.size(); ++k) {
          TQ_TRY(Value right, eval(*e.args[k + 1]));
          TQ_CHECK_OK(charge(right, true, e));
          TQ_TRY(bool r, at(e, compare(e.ops[k], left, right)));
          if (!r) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCond: {
        TQ_TRY(Value c, eval(*e.args[0]));
        if (truthy(c)) return eval(*e.args[1]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined(
            "the inline if expression evaluated to false and no else section was defined");
      }
    }
    return err("unknown expression");
  }

  static Result<bool> compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a);
    if (op == "notin") {
      TQ_TRY(bool r, contains(b, a));
      return !r;
    }
    if (a.is_undefined()) return undefined_error(a);
    if (b.is_undefined()) return undefined_error(b);
    if (op == "<") return less_than(a, b);
    if (op == ">") return less_than(b, a);
    if (op == "<=") {
      TQ_TRY(bool r, less_than(b, a));
      return !r;
    }
    TQ_TRY(bool r, less_than(a, b));  // >=
    return !r;
  }

  RenderLimits limits_;
  std::vector<Frame> frames_;
  std::string out_;
  int64_t steps_ = 0;
  size_t work_ = 0;  // never above limits_.max_work_bytes
  int macro_depth_ = 0;
};

}  // namespace

Result<std::string> render(const Body& body, const std::vector<std::pair<std::string, Value>>& vars,
                           const RenderLimits& limits) {
  return Renderer(limits).run(body, vars);
}

}  // namespace tq::jinja
