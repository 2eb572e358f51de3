#include "convert/allocate_convert.h"

#include <map>
#include <vector>

#include "base/sha256.h"
#include "eval/results_db.h"
#include "recipe/sensitivity.h"

namespace tq {

namespace {

using json = nlohmann::json;

uint64_t entry_bytes(const PlanEntry& e, DType dtype) {
  return e.spec ? quantized_bytes(*e.spec, e.shape[0], e.shape[1], dtype)
                : static_cast<uint64_t>(shape_numel(e.shape)) * dtype_size(dtype);
}

}  // namespace

Result<AllocateOutcome> allocate_convert_plan(ConvertJob& job, const AllocateRequest& req) {
  const std::string& path = req.sensitivity;
  if (path.empty())
    return err(
        "--target-bpw/--target-size need --sensitivity FILE: run `tq sensitivity {} -o "
        "sensitivity.json` first",
        job.source.path);
  if ((req.target_bpw > 0) == (req.target_bytes > 0))
    return err("give exactly one of --target-bpw and --target-size");
  TQ_TRY(SensitivityTable table, read_sensitivity(path));
  TQ_TRY(std::string table_sha, sha256_file(path));
  TQ_TRY(const std::string fp, eval::model_fingerprint(job.source));
  if (table.model_fingerprint != fp)
    return err(
        "{}: measured on another model ({}, fingerprint {:.12}) than {} (fingerprint {:.12}); "
        "run `tq sensitivity {}` for it",
        path, table.model, table.model_fingerprint, job.source.path, fp, job.source.path);

  if (table.rotation != req.rotation) {
    auto desc = [](const nlohmann::json& r) {
      return r.is_null() ? std::string("no rotation")
                         : fmt::format("rotation r1={} r2={} seed={}", r.value("r1", "?"),
                                       r.value("r2", "?"), r.value("seed", 0));
    };
    return err(
        "{}: measured with {} but this conversion folds {}; measure it with the same "
        "`tq sensitivity {}{}`",
        path, desc(table.rotation), desc(req.rotation), job.source.path,
        req.rotation.is_null() ? "" : " --rotate-weights …");
  }
  QuantPlan& plan = job.plan;
  const SizeStats before = plan.size();
  std::vector<AllocModule> mods;
  std::vector<PlanEntry*> free;
  uint64_t free_params = 0, free_bytes = 0;
  int pinned = 0;
  for (PlanEntry& e : plan.entries) {
    if (!e.kind->quantizable || e.kind->companion()) continue;  // the MTP keeps its spec
    if (e.pinned) {
      ++pinned;
      continue;
    }
    const ModuleSensitivity* m = table.find(e.module);
    if (!m)
      return err(
          "{}: module '{}' is not in the sensitivity table ({} of the model's modules are); "
          "finish it with `tq sensitivity {} --resume -o {}`",
          path, e.module, table.modules.size(), job.source.path, path);
    if (m->shape != e.shape)
      return err("{}: module '{}' has shape {} in the table but {} in {}", path, e.module,
                 shape_str(m->shape), shape_str(e.shape), job.source.path);
    AllocModule a;
    a.name = e.module;
    a.role = e.kind->role;
    a.params = static_cast<uint64_t>(shape_numel(e.shape));
    a.float_bytes = a.params * dtype_size(plan.dtype);
    a.scale_bytes = static_cast<int>(dtype_size(plan.dtype));
    // The table's bytes are at its own dtype; the plan's dtype decides the real size.
    for (const SpecKl& k : m->specs)
      if (e.shape[1] % k.spec.group_size == 0 && k.spec.bits >= e.min_bits)
        a.options.push_back({k.spec,
                             k.kl * (req.recovery ? req.recovery->factor_for(a.role, k.spec) : 1.0),
                             quantized_bytes(k.spec, e.shape[0], e.shape[1], plan.dtype), true});
    if (a.options.empty())
      return err("{}: module '{}' has no measured spec that fits its input width {}{}", path,
                 e.module, e.shape[1],
                 e.min_bits ? fmt::format(" with at least {} bits (min_bits)", e.min_bits) : "");
    free_params += a.params;
    free_bytes += entry_bytes(e, plan.dtype);
    mods.push_back(std::move(a));
    free.push_back(&e);
  }
  if (mods.empty())
    return err(
        "--target-bpw: the recipe and --keep-float decide every module; nothing is left "
        "to allocate");

  AllocBudget budget;
  budget.target_bpw = req.target_bpw;
  budget.target_bytes = req.target_bytes;
  budget.allow_over = req.allow_over;
  budget.fixed_params = before.params - free_params;
  budget.fixed_bytes = before.bytes - free_bytes;
  TQ_TRY(AllocPlan ap, allocate(mods, AllocConstraints{}, budget));
  const UniformComparison uni = compare_with_uniform(mods, ap);

  std::map<std::string, std::pair<QuantSpec, int>> counts;  // label -> (spec, modules)
  for (size_t i = 0; i < free.size(); ++i) {
    free[i]->spec = ap.modules[i].option.spec;
    free[i]->decided_by = fmt::format("allocation (KL {:.3g})", ap.modules[i].option.kl);
    if (free[i]->spec) {
      auto& c = counts[quant_spec_str(*free[i]->spec)];
      c.first = *free[i]->spec;
      ++c.second;
    }
  }
  int best = 0;
  for (const auto& [label, c] : counts)
    if (c.second > best) best = c.second, plan.global = c.first;

  const SizeStats after = plan.size();
  if (after.bytes != ap.bytes)
    return err("internal: allocated plan holds {} bytes but the allocator counted {}", after.bytes,
               ap.bytes);
  AllocateOutcome out;
  out.free_modules = static_cast<int>(free.size());
  out.pinned_modules = pinned;
  json spec_counts = json::object();
  for (const auto& [label, c] : counts) spec_counts[label] = c.second;
  out.record = {
      {"target_bpw", req.target_bpw > 0 ? json(req.target_bpw) : json(nullptr)},
      {"target_bytes", req.target_bytes > 0 ? json(req.target_bytes) : json(nullptr)},
      {"allow_over", req.allow_over},
      {"achieved_bpw", after.bpw},
      {"bytes", after.bytes},
      {"budget_bytes", ap.budget_bytes},
      {"predicted_kl", ap.predicted_kl},
      {"exact", ap.exact},
      {"free_modules", out.free_modules},
      {"pinned_modules", pinned},
      {"spec_counts", spec_counts},
      {"uniform",
       {{"spec", uni.spec ? json(quant_spec_str(*uni.spec)) : json(nullptr)},
        {"predicted_kl", uni.spec ? json(uni.predicted_kl) : json(nullptr)},
        {"bytes", uni.spec ? json(uni.bytes) : json(nullptr)},
        {"predicted_better", uni.uniform_better}}},
      {"sensitivity",
       {{"path", path},
        {"sha256", table_sha},
        {"model_fingerprint", table.model_fingerprint},
        {"calibration_sha256", table.calibration.sha256},
        {"windows", table.calibration.windows},
        {"seq_len", table.calibration.seq_len}}},
      {"gptq_recovery", req.recovery ? req.recovery->to_json() : json(nullptr)},
  };
  out.plan = std::move(ap);
  out.uniform = uni;
  return out;
}

}  // namespace tq
