// Renders a parsed chat template. Scoping follows jinja2: each for-loop iteration and each
// macro call gets its own frame; if-blocks do not; `set` writes the innermost frame.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "text/jinja/ast.h"

namespace tq::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  int64_t max_steps = 1'000'000;  // statements run + loop iterations
  // Bytes of values made (results, string copies, sequences walked, text emitted): bounds loops
  // over large values, which the step limit alone lets run for hours. 16x the output limit.
  size_t max_work_bytes = size_t{1} << 30;
};

// `vars` are the template's variables (messages, add_generation_prompt, ...); the globals
// range, namespace, dict, raise_exception and strftime_now come from jinja_builtins.
Result<std::string> render(const Body& body, const std::vector<std::pair<std::string, Value>>& vars,
                           const RenderLimits& limits = {});

}  // namespace tq::jinja
