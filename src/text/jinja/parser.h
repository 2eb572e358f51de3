// Parser of the chat-template Jinja subset: if/elif/else, for (with else, loop filters,
// tuple targets), set (names, namespace attributes, blocks), macro, break/continue, and
// transformers' {% generation %} tag; expressions with jinja2's precedence.
#pragma once

#include <string_view>

#include "base/result.h"
#include "text/jinja/ast.h"

namespace tq::jinja {

// Errors read "line L col C: problem"; tags we do not implement are named as such.
Result<Body> parse_template(std::string_view source);

}  // namespace tq::jinja
