// The parser's class, shared by parser.cc (statements) and parse_expr.cc (expressions).
// Internal to the interpreter.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace tq::jinja {

constexpr int kMaxParseDepth = 200;  // nesting of blocks and expressions; bounds the recursion

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Result<Body> parse_all();

 private:
  // ---- token helpers
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::kName && cur().text == n; }

  static std::string describe(const Token& t);

  template <typename... Args>
  Error fail(const Token& at, fmt::format_string<Args...> f, Args&&... args) const {
    return err("line {} col {}: {}", at.line, at.col, fmt::format(f, std::forward<Args>(args)...));
  }

  Status expect_op(std::string_view op);
  Status expect(Tok type, std::string_view what);
  Result<std::string> expect_name();

  ExprPtr node(ExprKind k, const Token& at);
  ExprPtr binary(ExprKind k, const Token& at, std::string op, ExprPtr a, ExprPtr b);

  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& x) : d(x) { ++d; }
    ~DepthGuard() { --d; }
  };
  Status deeper() const {
    if (depth_ > kMaxParseDepth)
      return fail(cur(), "template nested deeper than {} levels", kMaxParseDepth);
    return ok_status();
  }

  // ---- statements
  // Parses until EOF (end_names empty) or a {% name %} with name in end_names; then cur() is
  // that name and *found holds it.
  Result<Body> parse_body(std::initializer_list<std::string_view> end_names, std::string* found,
                          std::string_view opened = {});
  Status end_tag();  // cur() is the end tag's name

  Result<StmtPtr> parse_statement();

  // Names separated by commas (optionally in parentheses); with_ns also allows `ns.attr`.
  Result<std::vector<ExprPtr>> parse_targets(bool with_ns);

  // ---- expressions (jinja2's precedence, lowest first)
  bool tuple_end() const;
  Result<ExprPtr> parse_tuple(bool with_cond, bool explicit_parens);
  Result<ExprPtr> parse_expression(bool with_cond);
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary();
  Result<ExprPtr> parse_postfix(ExprPtr n);

  // An index expression or a slice a:b:c (kSlice with args[0] left null for the caller).
  Result<ExprPtr> parse_subscribed();

  Status parse_args(Expr& call);
  Result<ExprPtr> parse_call(ExprPtr callee);

  Result<std::string> dotted_name();
  Result<ExprPtr> parse_filter(ExprPtr operand);
  Result<ExprPtr> parse_test(ExprPtr operand);

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace tq::jinja
