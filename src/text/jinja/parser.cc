#include <initializer_list>

#include "text/jinja/parser.h"
#include "text/jinja/parser_impl.h"

namespace tq::jinja {

Result<Body> Parser::parse_all() {
  std::string end;
  TQ_TRY(Body body, parse_body({}, &end));
  return body;
}

std::string Parser::describe(const Token& t) {
  switch (t.type) {
    case Tok::kText:
      return "template data";
    case Tok::kVarBegin:
      return "'{{'";
    case Tok::kVarEnd:
      return "end of print statement '}}'";
    case Tok::kBlockBegin:
      return "'{%'";
    case Tok::kBlockEnd:
      return "end of statement block '%}'";
    case Tok::kEof:
      return "end of template";
    case Tok::kString:
      return "string literal";
    default:
      return "'" + t.text + "'";
  }
}

Status Parser::expect_op(std::string_view op) {
  if (!is_op(op)) return fail(cur(), "expected '{}', got {}", op, describe(cur()));
  advance();
  return ok_status();
}

Status Parser::expect(Tok type, std::string_view what) {
  if (cur().type != type) return fail(cur(), "expected {}, got {}", what, describe(cur()));
  advance();
  return ok_status();
}

Result<std::string> Parser::expect_name() {
  if (cur().type != Tok::kName) return fail(cur(), "expected a name, got {}", describe(cur()));
  std::string n = cur().text;
  advance();
  return n;
}

ExprPtr Parser::node(ExprKind k, const Token& at) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = at.line;
  e->col = at.col;
  return e;
}

ExprPtr Parser::binary(ExprKind k, const Token& at, std::string op, ExprPtr a, ExprPtr b) {
  auto e = node(k, at);
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

Result<StmtPtr> Parser::parse_statement() {
  const Token& tok = cur();
  auto s = std::make_unique<Stmt>();
  s->line = tok.line;
  s->col = tok.col;
  const std::string name = tok.text;
  std::string found;
  if (name == "if") {
    s->kind = StmtKind::kIf;
    while (true) {
      advance();  // if / elif
      TQ_TRY(ExprPtr c, parse_tuple(false, false));
      TQ_CHECK_OK(expect(Tok::kBlockEnd, "'%}'"));
      TQ_TRY(Body b, parse_body({"elif", "else", "endif"}, &found, "if"));
      s->branches.emplace_back(std::move(c), std::move(b));
      if (found != "elif") break;
    }
    if (found == "else") {
      TQ_CHECK_OK(end_tag());
      TQ_TRY(s->else_body, parse_body({"endif"}, &found, "if"));
    }
    TQ_CHECK_OK(end_tag());
  } else if (name == "for") {
    s->kind = StmtKind::kFor;
    advance();
    TQ_TRY(s->targets, parse_targets(false));
    if (!is_name("in")) return fail(cur(), "expected 'in', got {}", describe(cur()));
    advance();
    TQ_TRY(s->expr, parse_tuple(false, false));
    if (is_name("if")) {
      advance();
      TQ_TRY(s->cond, parse_expression(true));
    }
    if (is_name("recursive")) return fail(cur(), "unsupported: recursive for loops");
    TQ_CHECK_OK(expect(Tok::kBlockEnd, "'%}'"));
    TQ_TRY(s->body, parse_body({"endfor", "else"}, &found, "for"));
    if (found == "else") {
      TQ_CHECK_OK(end_tag());
      TQ_TRY(s->else_body, parse_body({"endfor"}, &found, "for"));
    }
    TQ_CHECK_OK(end_tag());
  } else if (name == "set") {
    advance();
    TQ_TRY(s->targets, parse_targets(true));
    if (is_op("=")) {
      s->kind = StmtKind::kSet;
      advance();
      TQ_TRY(s->expr, parse_tuple(true, false));
      TQ_CHECK_OK(expect(Tok::kBlockEnd, "'%}'"));
    } else {
      s->kind = StmtKind::kSetBlock;
      if (s->targets.size() != 1 || s->targets[0]->kind != ExprKind::kName)
        return fail(tok, "a set block assigns one name");
      ExprPtr f;
      while (is_op("|")) {
        TQ_TRY(f, parse_filter(std::move(f)));
      }
      s->expr = std::move(f);
      TQ_CHECK_OK(expect(Tok::kBlockEnd, "'%}'"));
      TQ_TRY(s->body, parse_body({"endset"}, &found, "set"));
      TQ_CHECK_OK(end_tag());
    }
  } else if (name == "macro") {
    s->kind = StmtKind::kMacro;
    advance();
    TQ_TRY(s->text, expect_name());
    TQ_CHECK_OK(expect_op("("));
    while (!is_op(")")) {
      if (!s->params.empty()) TQ_CHECK_OK(expect_op(","));
      if (is_op(")")) break;
      TQ_TRY(std::string p, expect_name());
      ExprPtr def;
      if (is_op("=")) {
        advance();
        TQ_TRY(def, parse_expression(true));
      }
      s->params.emplace_back(std::move(p), std::move(def));
    }
    advance();
    TQ_CHECK_OK(expect(Tok::kBlockEnd, "'%}'"));
    TQ_TRY(s->body, parse_body({"endmacro"}, &found, "macro"));
    TQ_CHECK_OK(end_tag());
  } else if (name == "break" || name == "continue") {
    s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    TQ_CHECK_OK(end_tag());
  } else if (name == "generation") {
    s->kind = StmtKind::kScope;
    TQ_CHECK_OK(end_tag());
    TQ_TRY(s->body, parse_body({"endgeneration"}, &found, "generation"));
    TQ_CHECK_OK(end_tag());
  } else {
    static constexpr std::string_view kKnown[] = {
        "include", "import",     "from", "extends", "block", "call", "filter",
        "with",    "autoescape", "do",   "print",   "trans", "raw"};
    for (auto k : kKnown)
      if (name == k) return fail(tok, "unsupported tag '{}'", name);
    return fail(tok, "unknown tag '{}'", name);
  }
  return s;
}

// Names separated by commas (optionally in parentheses); with_ns also allows `ns.attr`.
Result<std::vector<ExprPtr>> Parser::parse_targets(bool with_ns) {
  std::vector<ExprPtr> out;
  if (with_ns && cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == ".") {
    auto a = node(ExprKind::kAttr, cur());
    auto n = node(ExprKind::kName, cur());
    n->name = cur().text;
    advance();
    advance();
    TQ_TRY(a->name, expect_name());
    a->args.push_back(std::move(n));
    out.push_back(std::move(a));
    return out;
  }
  bool paren = is_op("(");
  if (paren) advance();
  while (true) {
    auto n = node(ExprKind::kName, cur());
    TQ_TRY(n->name, expect_name());
    out.push_back(std::move(n));
    if (!is_op(",")) break;
    advance();
    if (paren && is_op(")")) break;
  }
  if (paren) TQ_CHECK_OK(expect_op(")"));
  return out;
}

// Parses until EOF (end_names empty) or a {% name %} with name in end_names; then cur() is
// that name and *found holds it.
Result<Body> Parser::parse_body(std::initializer_list<std::string_view> end_names,
                                std::string* found, std::string_view opened) {
  DepthGuard g(depth_);
  TQ_CHECK_OK(deeper());
  Body body;
  while (true) {
    const Token& tok = cur();
    if (tok.type == Tok::kEof) {
      if (end_names.size() == 0) return body;
      std::string want;
      for (auto n : end_names) want += (want.empty() ? "'" : " or '") + std::string(n) + "'";
      return fail(tok, "unexpected end of template: the '{}' block needs {}", opened, want);
    }
    if (tok.type == Tok::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kText;
      s->text = tok.text;
      s->line = tok.line;
      s->col = tok.col;
      body.push_back(std::move(s));
      advance();
    } else if (tok.type == Tok::kVarBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kOutput;
      s->line = tok.line;
      s->col = tok.col;
      advance();
      TQ_TRY(s->expr, parse_tuple(true, false));
      TQ_CHECK_OK(expect(Tok::kVarEnd, "'}}'"));
      body.push_back(std::move(s));
    } else if (tok.type == Tok::kBlockBegin) {
      advance();
      if (cur().type != Tok::kName)
        return fail(cur(), "expected a tag name, got {}", describe(cur()));
      for (auto n : end_names) {
        if (cur().text == n) {
          *found = cur().text;
          return body;
        }
      }
      TQ_TRY(StmtPtr s, parse_statement());
      body.push_back(std::move(s));
    } else {
      return fail(tok, "unexpected {}", describe(tok));
    }
  }
}

Status Parser::end_tag() {
  advance();
  return expect(Tok::kBlockEnd, "'%}'");
}

Result<Body> parse_template(std::string_view source) {
  TQ_TRY(std::vector<Token> toks, lex(source));
  return Parser(std::move(toks)).parse_all();
}

}  // namespace tq::jinja
