// The results-database row of a published conversion (kind "convert"), so that `tq report`
// knows every artifact's size and recipe even after the artifact is gone.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "convert/convert.h"
#include "eval/results_db.h"

namespace tq {

// One-line description of how the plan was chosen: "affine 4-bit g64", "mixed_3_6",
// "allocated 3.5 bpw (affine 3-bit g64 ×120, …)", with "+N float" for float modules.
std::string recipe_summary(const ConvertJob& job, const nlohmann::json& allocation);

// The row: artifact = the published directory; model_fingerprint = its eval fingerprint; base =
// the source and its fingerprint; result = the summary (dest, params, bytes, bpw, recipe,
// source, source_fingerprint, allocation).
Result<eval::RunRecord> convert_run_record(const ConvertJob& job, const ConvertSummary& s,
                                           const nlohmann::json& allocation);

}  // namespace tq
