// The distillation progress line, shared by `tq distill` and `tq convert --distill`.
#pragma once

#include <functional>

#include "quant/distill.h"

namespace tq::cli {

// One rewritten line on a terminal, else a line every 10 s (and the last step's); `prefix`
// starts each line.
std::function<void(const DistillProgress&)> distill_progress_printer(const char* prefix);

}  // namespace tq::cli
