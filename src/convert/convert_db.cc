#include "convert/convert_db.h"

#include <fmt/format.h>

#include "model/model_source.h"

namespace tq {

using json = nlohmann::json;

std::string recipe_summary(const ConvertJob& job, const json& allocation) {
  const QuantPlan& p = job.plan;
  int floats = 0;
  for (const auto& e : p.entries)
    if (e.kind->quantizable && !e.spec) ++floats;
  std::string s;
  if (allocation.is_object() && allocation.contains("spec_counts")) {
    const json& t = allocation.contains("target_bpw") && !allocation["target_bpw"].is_null()
                        ? allocation["target_bpw"]
                        : allocation.value("target_bytes", json(nullptr));
    s = fmt::format("allocated {}{}", t.dump(),
                    allocation["target_bpw"].is_null() ? " bytes" : " bpw");
    std::string parts;
    for (const auto& [label, n] : allocation["spec_counts"].items())
      parts += fmt::format("{}{} ×{}", parts.empty() ? "" : ", ", label, n.dump());
    if (!parts.empty()) s += " (" + parts + ")";
  } else if (p.overrides().empty()) {
    s = quant_spec_str(p.global);
  } else {
    s = fmt::format("mixed: {} + {} per-module specs", quant_spec_str(p.global),
                    p.overrides().size());
  }
  if (floats > 0) s += fmt::format(" +{} float", floats);
  return s;
}

Result<eval::RunRecord> convert_run_record(const ConvertJob& job, const ConvertSummary& s,
                                           const json& allocation) {
  TQ_TRY(ModelSource out, open_model(s.dest));
  eval::RunRecord r;
  r.kind = "convert";
  r.artifact = s.dest;
  TQ_TRY(r.model_fingerprint, eval::model_fingerprint(out));
  r.base_artifact = job.recorded_source().path;
  TQ_TRY(r.base_fingerprint, eval::model_fingerprint(job.recorded_source()));
  r.result = {{"dest", s.dest},
              {"source", job.recorded_source().path},
              {"source_fingerprint", *r.base_fingerprint},
              {"params", s.size.params},
              {"bytes", s.size.bytes},
              {"bpw", s.size.bpw},
              {"dtype", dtype_name(job.plan.dtype)},
              {"recipe", recipe_summary(job, allocation)},
              {"seconds", s.seconds}};
  if (allocation.is_object()) r.result["allocation"] = allocation;
  return r;
}

}  // namespace tq
