// Tokenizer of the chat-template Jinja subset. Whitespace control follows jinja2 with the
// environment transformers uses: trim_blocks and lstrip_blocks on, `-` and `+` markers,
// newlines normalized to \n and one trailing newline dropped (keep_trailing_newline off).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace tq::jinja {

enum class Tok : uint8_t {
  kText,        // template data between tags
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,
  kInt,
  kFloat,
  kOp,  // operators and punctuation: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  kEof,
};

struct Token {
  Tok type = Tok::kEof;
  std::string text;  // kText data, kName, kString (unescaped), kOp
  int64_t ival = 0;
  double fval = 0.0;
  int line = 1;
  int col = 1;
};

// Errors read "line L col C: problem".
Result<std::vector<Token>> lex(std::string_view source);

}  // namespace tq::jinja
