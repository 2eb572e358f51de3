// The sensitivity progress line, shared by `tq sensitivity` and `tq convert --target-bpw` when
// it measures the table itself.
#pragma once

#include <functional>

#include "convert/sensitivity_run.h"

namespace tq::cli {

// One rewritten line on a terminal, else a line every 10 s; `prefix` starts each line.
std::function<void(const SensitivityProgress&)> sensitivity_progress_printer(const char* prefix);

}  // namespace tq::cli
