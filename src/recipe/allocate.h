// Bit allocation (issue 7): one storage option per module so that the summed KL estimate is
// minimal while the whole model fits a size budget (bpw by mlx-lm's definition, FORMATS.md §4.3:
// 8 · stored bytes / logical parameters, every tensor counted).
//
// The problem is a multiple-choice knapsack. It is solved exactly by dynamic programming over the
// budget in byte units: the unit is the GCD of every option's extra bytes over its module's
// cheapest option, so small instances are solved byte-exactly; when that would need more than
// `max_states` budget cells, the unit grows and each option's cost is rounded UP to whole units,
// which keeps every plan within the budget and loses at most (modules × unit) bytes of it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "model/tensor_table.h"

namespace tq {

// One way to store a module: quantized at `spec`, or kept float (no spec).
struct AllocOption {
  std::optional<QuantSpec> spec;
  double kl = 0;         // KL estimate with only this module stored this way
  uint64_t bytes = 0;    // stored bytes of the module's weight (+ scales and biases)
  bool measured = true;  // false: added for a pin, its KL is unknown and counted as 0
};

struct AllocModule {
  std::string name;  // module path, e.g. "model.layers.3.mlp.down_proj"
  TensorRole role = TensorRole::kAttnQ;
  uint64_t params = 0;       // logical parameters of the weight
  uint64_t float_bytes = 0;  // bytes when kept float (for a pin to float that the table lacks)
  int scale_bytes = 2;       // bytes of one affine scale/bias (the model float dtype)
  std::vector<AllocOption> options;
};

struct AllocConstraints {
  std::map<TensorRole, int> min_bits;  // quantized options with fewer bits are excluded
  // module name -> the only allowed option: a spec, or std::nullopt for float.
  std::map<std::string, std::optional<QuantSpec>> pinned;
};

// Tolerance of the achieved bpw: the plan lands in [target - 0.02, target] (or, with
// allow_over, within 0.02 of the target on either side) whenever the options allow it.
inline constexpr double kBpwTolerance = 0.02;

struct AllocBudget {
  double target_bpw = 0;      // either a bpw target
  uint64_t target_bytes = 0;  // or a total size in bytes (used when target_bpw is 0)
  bool allow_over = false;    // the plan may exceed the target by up to kBpwTolerance bpw
  uint64_t fixed_params = 0;  // tensors outside the modules (norms, biases, ...): part of bpw
  uint64_t fixed_bytes = 0;
  int64_t max_states = int64_t{1} << 20;  // DP budget cells (also capped by a 64 MiB table)
};

struct AllocChoice {
  std::string name;
  TensorRole role = TensorRole::kAttnQ;
  uint64_t params = 0;
  AllocOption option;
};

struct AllocPlan {
  std::vector<AllocChoice> modules;  // in input order
  double predicted_kl = 0;           // sum of the chosen options' KL
  uint64_t params = 0;               // whole model (modules + fixed)
  uint64_t bytes = 0;                // whole model
  double bpw = 0;                    // 8 · bytes / params
  uint64_t budget_bytes = 0;         // whole-model byte budget the plan had to fit
  uint64_t unit_bytes = 1;           // DP resolution
  bool exact = true;                 // unit covers every cost exactly: the optimum is exact
  int unmeasured = 0;                // chosen options without a measured KL (pins)
};

// Bytes of a module of `params` weights stored at `spec` with `scale_bytes` scales (affine
// also stores biases); params must be a multiple of the group size.
uint64_t quantized_module_bytes(uint64_t params, const QuantSpec& spec, int scale_bytes);

// The best uniform plan (one spec for every module) from the same options whose whole-model bytes
// are at most the plan's: a guard on the allocator, which should never be predicted worse.
struct UniformComparison {
  std::optional<QuantSpec> spec;  // unset: no spec common to every module fits the plan's bytes
  double predicted_kl = 0;        // summed KL of the uniform plan
  uint64_t bytes = 0;             // whole-model bytes of the uniform plan
  bool uniform_better = false;    // its predicted KL is below the plan's
};

// `plan` is allocate()'s result over `modules` (same order).
UniformComparison compare_with_uniform(std::span<const AllocModule> modules, const AllocPlan& plan);

// Errors: no modules, a module without allowed options (naming the constraint), a budget below
// the smallest allowed plan (naming both in bpw and bytes), a bad target.
Result<AllocPlan> allocate(std::span<const AllocModule> modules, const AllocConstraints& cons,
                           const AllocBudget& budget);

}  // namespace tq
