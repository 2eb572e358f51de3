// The rotation-folded float model as a directory (what `tq convert --rotate-weights
// --no-quantize --dtype f32` writes): `tq sensitivity --rotate-weights` measures on it.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "model/weight_stages.h"
#include "rotate/fold_plan.h"

namespace tq {

// Writes the folded f32 model of `source` to `dest` (replaced if present).
Status write_folded_float(const std::string& source, const RotationOptions& ro,
                          const std::string& dest);

// The same through any transforms (applied in order): every tensor f32, published atomically.
Status write_float_model(const std::string& source, const std::vector<WeightTransform*>& transforms,
                         const std::string& dest);

}  // namespace tq
