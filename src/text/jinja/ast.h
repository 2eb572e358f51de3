// Syntax tree of the chat-template Jinja subset.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace tq::jinja {

enum class ExprKind : uint8_t {
  kLiteral,  // literal
  kName,     // name
  kList,     // args = items
  kTuple,    // args = items
  kDict,     // args = k0, v0, k1, v1, ...
  kAttr,     // args[0].name
  kItem,     // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]], missing parts null
  kCall,     // args[0](args[1:], kwargs)
  kFilter,   // args[0] | name(args[1:], kwargs); args[0] null in {% set x | f %} blocks
  kTest,     // args[0] is [not] name(args[1:])
  kNot,      // not args[0]
  kNeg,      // -args[0]
  kPos,      // +args[0]
  kBinary,   // args[0] name args[1], name in + - * / // % ** ~
  kAnd,      // args[0] and args[1]
  kOr,       // args[0] or args[1]
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained like Python)
  kCond,     // args[1] if args[0] else args[2] (args[2] null: undefined)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0, col = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: == != < <= > >= in notin
  bool negated = false;          // kTest: `is not`
};

enum class StmtKind : uint8_t {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches (cond, body); else_body
  kFor,       // for targets in expr [if cond]: body; else_body
  kSet,       // set targets = expr
  kSetBlock,  // set targets [| filter] ... endset: body; expr = the filter (kFilter, args[0] null)
  kMacro,     // macro name(params): body
  kBreak,
  kContinue,
  kScope,  // a body rendered in place ({% generation %})
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0, col = 0;
  std::string text;  // kText; kMacro: the macro name
  ExprPtr expr;
  ExprPtr cond;
  // kFor / kSet targets: kName expressions, or one kAttr on a name (set ns.x); several unpack
  std::vector<ExprPtr> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: name, default (may be null)
};

}  // namespace tq::jinja
