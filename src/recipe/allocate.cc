#include "recipe/allocate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tq {

namespace {

constexpr int64_t kMaxTableBytes = int64_t{64} << 20;  // DP choice table (one byte per cell)

std::string option_str(const AllocOption& o) {
  return o.spec ? quant_spec_str(*o.spec) : std::string("float");
}

// The options a module may take under the constraints, cheapest first.
Result<std::vector<AllocOption>> allowed_options(const AllocModule& m,
                                                 const AllocConstraints& cons) {
  std::vector<AllocOption> out;
  if (auto pin = cons.pinned.find(m.name); pin != cons.pinned.end()) {
    for (const AllocOption& o : m.options)
      if (o.spec == pin->second) out.push_back(o);
    if (out.empty()) {
      AllocOption o;
      o.spec = pin->second;
      o.measured = false;
      if (pin->second) {
        if (Status st = validate_quant_spec(*pin->second); !st.ok())
          return err("module {}: pinned spec: {}", m.name, st.error().message);
        if (m.params % static_cast<uint64_t>(pin->second->group_size) != 0)
          return err("module {}: pinned {}: {} weights are not a multiple of the group size",
                     m.name, quant_spec_str(*pin->second), m.params);
        o.bytes = quantized_module_bytes(m.params, *pin->second, m.scale_bytes);
      } else {
        if (m.float_bytes == 0)
          return err("module {}: pinned float but its float size is unknown", m.name);
        o.bytes = m.float_bytes;
      }
      out.push_back(o);
    }
    out.resize(1);
    return out;
  }
  int min_bits = 0;
  if (auto it = cons.min_bits.find(m.role); it != cons.min_bits.end()) min_bits = it->second;
  for (const AllocOption& o : m.options)
    if (!o.spec || o.spec->bits >= min_bits) out.push_back(o);
  if (out.empty()) {
    if (m.options.empty()) return err("module {}: no candidate specs", m.name);
    return err("module {}: no candidate spec has at least {} bits (minimum for role {})", m.name,
               min_bits, tensor_role_name(m.role));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const AllocOption& a, const AllocOption& b) { return a.bytes < b.bytes; });
  if (out.size() > 255)
    return err("module {}: {} candidate specs (at most 255)", m.name, out.size());
  return out;
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

}  // namespace

uint64_t quantized_module_bytes(uint64_t params, const QuantSpec& spec, int scale_bytes) {
  const uint64_t groups = params / static_cast<uint64_t>(spec.group_size);
  const bool affine = quant_mode_has_biases(spec.mode);
  const uint64_t per_group = affine ? 2 * static_cast<uint64_t>(scale_bytes) : 1;
  return params * static_cast<uint64_t>(spec.bits) / 8 + groups * per_group;
}

Result<AllocPlan> allocate(std::span<const AllocModule> modules, const AllocConstraints& cons,
                           const AllocBudget& budget) {
  if (modules.empty()) return err("allocation: no quantizable modules");
  for (const auto& pin : cons.pinned) {
    const std::string& name = pin.first;  // clang 14 cannot capture a structured binding
    bool found = std::any_of(modules.begin(), modules.end(),
                             [&](const AllocModule& m) { return m.name == name; });
    if (!found) return err("allocation: pinned module '{}' is not among the modules", name);
  }
  const size_t n = modules.size();
  std::vector<std::vector<AllocOption>> opts(n);
  AllocPlan plan;
  plan.params = budget.fixed_params;
  uint64_t min_bytes = budget.fixed_bytes, max_extra = 0;
  for (size_t m = 0; m < n; ++m) {
    TQ_TRY(opts[m], allowed_options(modules[m], cons));
    for (const AllocOption& o : opts[m])
      if (!std::isfinite(o.kl))
        return err("module {}: the KL estimate of {} is not finite", modules[m].name,
                   option_str(o));
    plan.params += modules[m].params;
    min_bytes += opts[m].front().bytes;
    max_extra += opts[m].back().bytes - opts[m].front().bytes;
  }
  if (plan.params == 0) return err("allocation: the model has no parameters");

  // Whole-model byte budget: floor keeps 8·bytes/params at or below the target.
  const long double P = static_cast<long double>(plan.params);
  long double limit = 0;
  if (budget.target_bpw != 0) {
    if (!std::isfinite(budget.target_bpw) || budget.target_bpw <= 0)
      return err("allocation: target bpw {} is not a positive number", budget.target_bpw);
    limit = budget.target_bpw * P / 8;
  } else if (budget.target_bytes != 0) {
    limit = static_cast<long double>(budget.target_bytes);
  } else {
    return err("allocation: no target (give a target bpw or a target size)");
  }
  if (budget.allow_over) limit += kBpwTolerance * P / 8;
  if (limit >= static_cast<long double>(std::numeric_limits<int64_t>::max()))
    return err("allocation: target size too large");
  plan.budget_bytes = static_cast<uint64_t>(std::floor(limit));
  auto bpw_of = [&](uint64_t bytes) { return 8.0 * static_cast<double>(bytes) / plan.params; };
  if (min_bytes > plan.budget_bytes)
    return err(
        "allocation: the target ({} bytes, {:.4f} bpw) is below the smallest plan the "
        "constraints allow ({} bytes, {:.4f} bpw)",
        plan.budget_bytes, bpw_of(plan.budget_bytes), min_bytes, bpw_of(min_bytes));

  // Budget cells: the slack above the cheapest plan, in units of `unit` bytes.
  const uint64_t slack = std::min(plan.budget_bytes - min_bytes, max_extra);
  uint64_t g = 0;
  for (size_t m = 0; m < n; ++m)
    for (const AllocOption& o : opts[m]) g = std::gcd(g, o.bytes - opts[m].front().bytes);
  if (g == 0) g = 1;
  const int64_t max_cells =
      std::max<int64_t>(2, std::min<int64_t>(budget.max_states, kMaxTableBytes / int64_t(n)));
  uint64_t unit = g;
  if (slack / g + 1 > static_cast<uint64_t>(max_cells))
    unit = ceil_div(slack, static_cast<uint64_t>(max_cells - 1));
  plan.unit_bytes = unit;
  plan.exact = true;
  const size_t cells = static_cast<size_t>(slack / unit) + 1;
  std::vector<std::vector<uint32_t>> cost(n);
  for (size_t m = 0; m < n; ++m)
    for (const AllocOption& o : opts[m]) {
      const uint64_t extra = o.bytes - opts[m].front().bytes;
      if (extra % unit != 0) plan.exact = false;
      cost[m].push_back(static_cast<uint32_t>(std::min<uint64_t>(ceil_div(extra, unit), cells)));
    }

  // best[c]: least summed KL of the modules so far using at most c cells; ties keep the
  // cheaper option (options are sorted by bytes).
  std::vector<double> best(cells, 0.0), next(cells);
  std::vector<uint8_t> choice(n * cells);
  for (size_t m = 0; m < n; ++m) {
    uint8_t* ch = choice.data() + m * cells;
    for (size_t c = 0; c < cells; ++c) {
      double v = std::numeric_limits<double>::infinity();
      uint8_t k_best = 0;
      for (size_t k = 0; k < opts[m].size(); ++k) {
        if (cost[m][k] > c) continue;
        const double cand = best[c - cost[m][k]] + opts[m][k].kl;
        if (cand < v) {
          v = cand;
          k_best = static_cast<uint8_t>(k);
        }
      }
      next[c] = v;
      ch[c] = k_best;
    }
    best.swap(next);
  }
  std::vector<size_t> pick(n);
  size_t c = cells - 1;
  for (size_t m = n; m-- > 0;) {
    pick[m] = choice[m * cells + c];
    c -= cost[m][pick[m]];
  }

  plan.bytes = budget.fixed_bytes;
  for (size_t m = 0; m < n; ++m) {
    const AllocOption& o = opts[m][pick[m]];
    plan.modules.push_back({modules[m].name, modules[m].role, modules[m].params, o});
    plan.predicted_kl += o.kl;
    plan.bytes += o.bytes;
    if (!o.measured) ++plan.unmeasured;
  }
  plan.bpw = bpw_of(plan.bytes);
  return plan;
}

UniformComparison compare_with_uniform(std::span<const AllocModule> modules,
                                       const AllocPlan& plan) {
  UniformComparison out;
  if (modules.empty() || plan.modules.size() != modules.size()) return out;
  uint64_t chosen = 0;
  for (const AllocChoice& c : plan.modules) chosen += c.option.bytes;
  const uint64_t rest = plan.bytes - chosen;  // tensors outside the modules
  for (const AllocOption& first : modules[0].options) {
    if (!first.spec || !first.measured) continue;
    double kl = 0;
    uint64_t bytes = rest;
    bool everywhere = true;
    for (const AllocModule& m : modules) {
      auto it = std::find_if(m.options.begin(), m.options.end(), [&](const AllocOption& o) {
        return o.measured && o.spec == first.spec;
      });
      if (it == m.options.end()) {
        everywhere = false;
        break;
      }
      kl += it->kl;
      bytes += it->bytes;
    }
    if (!everywhere || bytes > plan.bytes) continue;
    if (!out.spec || kl < out.predicted_kl) {
      out.spec = first.spec;
      out.predicted_kl = kl;
      out.bytes = bytes;
    }
  }
  // A relative margin keeps summation-order noise from raising the warning.
  out.uniform_better =
      out.spec && out.predicted_kl < plan.predicted_kl - 1e-9 * std::fabs(plan.predicted_kl);
  return out;
}

}  // namespace tq
