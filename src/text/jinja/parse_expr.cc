// Expressions with jinja2's precedence, lowest first: conditional, or, and, not, comparisons
// (chained, in, not in), + -, ~, * / // %, **, unary - +, then filters, tests and calls.
#include "text/jinja/parser_impl.h"

namespace tq::jinja {

bool Parser::tuple_end() const {
  return cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")");
}

Result<ExprPtr> Parser::parse_tuple(bool with_cond, bool explicit_parens) {
  const Token& at = cur();
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) TQ_CHECK_OK(expect_op(","));
    if (tuple_end()) break;
    TQ_TRY(ExprPtr e, parse_expression(with_cond));
    items.push_back(std::move(e));
    if (!is_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) return fail(cur(), "expected an expression, got {}", describe(cur()));
  }
  auto t = node(ExprKind::kTuple, at);
  t->args = std::move(items);
  return t;
}

Result<ExprPtr> Parser::parse_expression(bool with_cond) {
  if (!with_cond) return parse_or();
  TQ_TRY(ExprPtr e, parse_or());
  while (is_name("if")) {
    const Token& at = cur();
    advance();
    TQ_TRY(ExprPtr c, parse_or());
    ExprPtr otherwise;
    if (is_name("else")) {
      advance();
      TQ_TRY(otherwise, parse_expression(true));
    }
    auto n = node(ExprKind::kCond, at);
    n->args.push_back(std::move(c));
    n->args.push_back(std::move(e));
    n->args.push_back(std::move(otherwise));
    e = std::move(n);
  }
  return e;
}

Result<ExprPtr> Parser::parse_or() {
  TQ_TRY(ExprPtr l, parse_and());
  while (is_name("or")) {
    const Token& at = cur();
    advance();
    TQ_TRY(ExprPtr r, parse_and());
    l = binary(ExprKind::kOr, at, "or", std::move(l), std::move(r));
  }
  return l;
}

Result<ExprPtr> Parser::parse_and() {
  TQ_TRY(ExprPtr l, parse_not());
  while (is_name("and")) {
    const Token& at = cur();
    advance();
    TQ_TRY(ExprPtr r, parse_not());
    l = binary(ExprKind::kAnd, at, "and", std::move(l), std::move(r));
  }
  return l;
}

Result<ExprPtr> Parser::parse_not() {
  if (!is_name("not")) return parse_compare();
  DepthGuard g(depth_);
  TQ_CHECK_OK(deeper());
  auto n = node(ExprKind::kNot, cur());
  advance();
  TQ_TRY(ExprPtr e, parse_not());
  n->args.push_back(std::move(e));
  return n;
}

Result<ExprPtr> Parser::parse_compare() {
  const Token& at = cur();
  TQ_TRY(ExprPtr first, parse_math1());
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      op = cur().text;
      advance();
    } else if (is_name("in")) {
      op = "in";
      advance();
    } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
      op = "notin";
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = node(ExprKind::kCompare, at);
      cmp->args.push_back(std::move(first));
    }
    TQ_TRY(ExprPtr r, parse_math1());
    cmp->ops.push_back(op);
    cmp->args.push_back(std::move(r));
  }
  return cmp ? std::move(cmp) : std::move(first);
}

Result<ExprPtr> Parser::parse_math1() {
  TQ_TRY(ExprPtr l, parse_concat());
  while (is_op("+") || is_op("-")) {
    const Token& at = cur();
    std::string op = at.text;
    advance();
    TQ_TRY(ExprPtr r, parse_concat());
    l = binary(ExprKind::kBinary, at, op, std::move(l), std::move(r));
  }
  return l;
}

Result<ExprPtr> Parser::parse_concat() {
  TQ_TRY(ExprPtr l, parse_math2());
  while (is_op("~")) {
    const Token& at = cur();
    advance();
    TQ_TRY(ExprPtr r, parse_math2());
    l = binary(ExprKind::kBinary, at, "~", std::move(l), std::move(r));
  }
  return l;
}

Result<ExprPtr> Parser::parse_math2() {
  TQ_TRY(ExprPtr l, parse_pow());
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& at = cur();
    std::string op = at.text;
    advance();
    TQ_TRY(ExprPtr r, parse_pow());
    l = binary(ExprKind::kBinary, at, op, std::move(l), std::move(r));
  }
  return l;
}

Result<ExprPtr> Parser::parse_pow() {
  TQ_TRY(ExprPtr l, parse_unary(true));
  while (is_op("**")) {
    const Token& at = cur();
    advance();
    TQ_TRY(ExprPtr r, parse_unary(true));
    l = binary(ExprKind::kBinary, at, "**", std::move(l), std::move(r));
  }
  return l;
}

Result<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard g(depth_);
  TQ_CHECK_OK(deeper());
  ExprPtr n;
  if (is_op("-") || is_op("+")) {
    n = node(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur());
    advance();
    TQ_TRY(ExprPtr e, parse_unary(false));
    n->args.push_back(std::move(e));
  } else {
    TQ_TRY(n, parse_primary());
  }
  TQ_TRY(n, parse_postfix(std::move(n)));
  if (!with_filter) return n;
  while (true) {
    if (is_op("|")) {
      TQ_TRY(n, parse_filter(std::move(n)));
    } else if (is_name("is")) {
      TQ_TRY(n, parse_test(std::move(n)));
    } else if (is_op("(")) {
      TQ_TRY(n, parse_call(std::move(n)));
    } else {
      return n;
    }
  }
}

Result<ExprPtr> Parser::parse_primary() {
  const Token& tok = cur();
  ExprPtr n;
  switch (tok.type) {
    case Tok::kName: {
      n = node(ExprKind::kLiteral, tok);
      const std::string& s = tok.text;
      if (s == "true" || s == "True") {
        n->literal = Value::boolean(true);
      } else if (s == "false" || s == "False") {
        n->literal = Value::boolean(false);
      } else if (s == "none" || s == "None") {
        n->literal = Value::none();
      } else {
        n->kind = ExprKind::kName;
        n->name = s;
      }
      advance();
      return n;
    }
    case Tok::kString: {
      std::string s;
      while (cur().type == Tok::kString) {
        s += cur().text;
        advance();
      }
      n = node(ExprKind::kLiteral, tok);
      n->literal = Value::string(std::move(s));
      return n;
    }
    case Tok::kInt:
    case Tok::kFloat:
      n = node(ExprKind::kLiteral, tok);
      n->literal = tok.type == Tok::kInt ? Value::integer(tok.ival) : Value::number(tok.fval);
      advance();
      return n;
    default:
      break;
  }
  DepthGuard g(depth_);
  TQ_CHECK_OK(deeper());
  if (is_op("(")) {
    advance();
    TQ_TRY(n, parse_tuple(true, true));
    TQ_CHECK_OK(expect_op(")"));
    return n;
  }
  if (is_op("[") || is_op("{")) {
    bool is_dict = is_op("{");
    std::string close = is_dict ? "}" : "]";
    n = node(is_dict ? ExprKind::kDict : ExprKind::kList, tok);
    advance();
    while (!is_op(close)) {
      if (!n->args.empty()) TQ_CHECK_OK(expect_op(","));
      if (is_op(close)) break;
      TQ_TRY(ExprPtr k, parse_expression(true));
      n->args.push_back(std::move(k));
      if (is_dict) {
        TQ_CHECK_OK(expect_op(":"));
        TQ_TRY(ExprPtr v, parse_expression(true));
        n->args.push_back(std::move(v));
      }
    }
    advance();
    return n;
  }
  return fail(tok, "unexpected {}", describe(tok));
}

Result<ExprPtr> Parser::parse_postfix(ExprPtr n) {
  while (true) {
    const Token& at = cur();
    if (is_op(".")) {
      advance();
      if (cur().type == Tok::kName) {
        auto a = node(ExprKind::kAttr, at);
        a->name = cur().text;
        a->args.push_back(std::move(n));
        n = std::move(a);
      } else if (cur().type == Tok::kInt) {
        auto a = node(ExprKind::kItem, at);
        auto k = node(ExprKind::kLiteral, cur());
        k->literal = Value::integer(cur().ival);
        a->args.push_back(std::move(n));
        a->args.push_back(std::move(k));
        n = std::move(a);
      } else {
        return fail(cur(), "expected an attribute name, got {}", describe(cur()));
      }
      advance();
    } else if (is_op("[")) {
      advance();
      std::vector<ExprPtr> subs;
      while (!is_op("]")) {
        if (!subs.empty()) TQ_CHECK_OK(expect_op(","));
        TQ_TRY(ExprPtr s, parse_subscribed());
        subs.push_back(std::move(s));
      }
      advance();
      if (subs.empty()) return fail(at, "empty subscript");
      if (subs.size() > 1) {
        for (const auto& x : subs)
          if (x->kind == ExprKind::kSlice && !x->args[0])
            return fail(at, "unsupported: a slice inside a tuple subscript");
      }
      if (subs.size() == 1 && subs[0]->kind == ExprKind::kSlice && !subs[0]->args[0]) {
        subs[0]->args[0] = std::move(n);
        n = std::move(subs[0]);
      } else {
        auto a = node(ExprKind::kItem, at);
        a->args.push_back(std::move(n));
        if (subs.size() == 1) {
          a->args.push_back(std::move(subs[0]));
        } else {
          auto t = node(ExprKind::kTuple, at);
          t->args = std::move(subs);
          a->args.push_back(std::move(t));
        }
        n = std::move(a);
      }
    } else if (is_op("(")) {
      TQ_TRY(n, parse_call(std::move(n)));
    } else {
      return n;
    }
  }
}

// An index expression or a slice a:b:c (kSlice with args[0] left null for the caller).
Result<ExprPtr> Parser::parse_subscribed() {
  const Token& at = cur();
  ExprPtr first;
  if (!is_op(":")) {
    TQ_TRY(first, parse_expression(true));
    if (!is_op(":")) return first;
  }
  advance();  // ':'
  auto s = node(ExprKind::kSlice, at);
  s->args.push_back(nullptr);
  s->args.push_back(std::move(first));
  ExprPtr stop, step;
  if (!is_op("]") && !is_op(",") && !is_op(":")) {
    TQ_TRY(stop, parse_expression(true));
  }
  if (is_op(":")) {
    advance();
    if (!is_op("]") && !is_op(",")) {
      TQ_TRY(step, parse_expression(true));
    }
  }
  s->args.push_back(std::move(stop));
  s->args.push_back(std::move(step));
  return s;
}

Status Parser::parse_args(Expr& call) {
  TQ_CHECK_OK(expect_op("("));
  bool any = false;
  while (!is_op(")")) {
    if (any) TQ_CHECK_OK(expect_op(","));
    if (is_op(")")) break;
    any = true;
    if (is_op("*") || is_op("**")) return fail(cur(), "unsupported: *args / **kwargs in calls");
    if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
      std::string k = cur().text;
      advance();
      advance();
      TQ_TRY(ExprPtr v, parse_expression(true));
      call.kwargs.emplace_back(std::move(k), std::move(v));
    } else {
      if (!call.kwargs.empty()) return fail(cur(), "positional argument follows keyword argument");
      TQ_TRY(ExprPtr v, parse_expression(true));
      call.args.push_back(std::move(v));
    }
  }
  advance();
  return ok_status();
}

Result<ExprPtr> Parser::parse_call(ExprPtr callee) {
  auto c = node(ExprKind::kCall, cur());
  c->args.push_back(std::move(callee));
  TQ_CHECK_OK(parse_args(*c));
  return c;
}

Result<std::string> Parser::dotted_name() {
  TQ_TRY(std::string n, expect_name());
  while (is_op(".")) {
    advance();
    TQ_TRY(std::string m, expect_name());
    n += "." + m;
  }
  return n;
}

Result<ExprPtr> Parser::parse_filter(ExprPtr operand) {
  auto f = node(ExprKind::kFilter, cur());
  advance();  // '|'
  f->line = cur().line;
  f->col = cur().col;
  TQ_TRY(f->name, dotted_name());
  f->args.push_back(std::move(operand));
  if (is_op("(")) TQ_CHECK_OK(parse_args(*f));
  return f;
}

Result<ExprPtr> Parser::parse_test(ExprPtr operand) {
  auto t = node(ExprKind::kTest, cur());
  advance();  // 'is'
  if (is_name("not")) {
    t->negated = true;
    advance();
  }
  t->line = cur().line;
  t->col = cur().col;
  TQ_TRY(t->name, dotted_name());
  t->args.push_back(std::move(operand));
  if (is_op("(")) {
    TQ_CHECK_OK(parse_args(*t));
  } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
              cur().type == Tok::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) return fail(cur(), "cannot chain multiple tests with 'is'");
    TQ_TRY(ExprPtr a, parse_primary());
    TQ_TRY(a, parse_postfix(std::move(a)));
    t->args.push_back(std::move(a));
  }
  return t;
}

}  // namespace tq::jinja
