// The rotation-folded float model as a directory (what `tq convert --rotate-weights
// --no-quantize --dtype f32` writes): `tq sensitivity --rotate-weights` measures on it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "rotate/fold_plan.h"

namespace tq {

// Writes the folded f32 model of `source` to `dest` (replaced if present).
Status write_folded_float(const std::string& source, const RotationOptions& ro,
                          const std::string& dest);

// What a sensitivity table records of the rotation it was measured under, and what
// `tq convert --rotate-weights --target-bpw` compares: {"r1", "r2", "seed"}.
nlohmann::json rotation_identity(const RotationOptions& ro);

}  // namespace tq
