// tq convert --target-bpw / --target-size: after the normal plan is built (recipe rules and
// --keep-float pin the modules they decide), every module the plan left at the default spec is
// free; the allocator (recipe/allocate.h) chooses its spec among the sensitivity table's measured
// specs so that the summed KL estimate is minimal within the budget, and the plan takes them.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "convert/convert.h"
#include "convert/gptq_recovery.h"
#include "recipe/allocate.h"

namespace tq {

struct AllocateRequest {
  double target_bpw = 0;      // either a bpw target
  uint64_t target_bytes = 0;  // or a whole-model size in bytes
  bool allow_over = false;
  std::string sensitivity;  // sensitivity.json path (required)
  // The rotation the conversion folds (rotation_identity), null for none: the table must
  // have been measured under the same one.
  nlohmann::json rotation;
  // The conversion runs GPTQ: each option's RTN KL is scaled by what GPTQ recovers at its role
  // and spec (convert/gptq_recovery.h). Null: the table's KLs as they are.
  const GptqRecovery* recovery = nullptr;
};

struct AllocateOutcome {
  AllocPlan plan;             // the allocator's plan over the free modules (+ fixed rest)
  nlohmann::json record;      // what tq_metadata.json's "allocation" holds
  UniformComparison uniform;  // the best uniform plan of at most the same bytes
  int free_modules = 0, pinned_modules = 0;
};

// Validates the table against the job's source (fingerprint, module shapes; errors name the
// file), allocates, and rewrites the free entries' specs in job.plan (decided_by "allocation";
// the global spec becomes the most common allocated one so that config.json needs the fewest
// per-module dicts).
Result<AllocateOutcome> allocate_convert_plan(ConvertJob& job, const AllocateRequest& req);

}  // namespace tq
