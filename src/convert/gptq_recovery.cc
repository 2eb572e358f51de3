#include "convert/gptq_recovery.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>

#include "convert/float_pass.h"
#include "quant/gptq_driver.h"
#include "quant/gptq_quantizer.h"
#include "quant/hessian.h"

namespace tq {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<int64_t> recovery_layers(int64_t n, int k) {
  std::vector<int64_t> out;
  if (n <= 0 || k <= 0) return out;
  const int64_t kk = std::min<int64_t>(n, k);
  for (int64_t i = 0; i < kk; ++i) out.push_back((2 * i + 1) * n / (2 * kk));
  return out;
}

double GptqRecovery::factor_for(TensorRole role, const QuantSpec& spec) const {
  auto it = factor.find(role);
  if (it == factor.end()) return 1.0;
  int best = -1;
  for (size_t i = 0; i < specs.size(); ++i) {
    const QuantSpec& s = specs[i];
    if (s == spec) return it->second[i];
    if (s.mode != spec.mode || s.group_size != spec.group_size) continue;
    if (best < 0 ||
        std::abs(s.bits - spec.bits) < std::abs(specs[static_cast<size_t>(best)].bits - spec.bits))
      best = static_cast<int>(i);
  }
  return best < 0 ? 1.0 : it->second[static_cast<size_t>(best)];
}

nlohmann::json GptqRecovery::to_json() const {
  nlohmann::json f = nlohmann::json::object();
  for (const auto& [role, v] : factor) {
    nlohmann::json by_spec = nlohmann::json::object();
    for (size_t i = 0; i < specs.size(); ++i) by_spec[quant_spec_str(specs[i])] = v[i];
    f[std::string(tensor_role_name(role))] = by_spec;
  }
  return {{"method", "geometric mean of GPTQ / RTN proxy loss per role and spec"},
          {"layers", layers},
          {"rows", rows},
          {"seq_len", seq_len},
          {"modules", modules},
          {"seconds", seconds},
          {"factor", f}};
}

Result<GptqRecovery> measure_gptq_recovery(ConvertJob& job, const CalibSet& calib,
                                           const GptqRecoveryOptions& o) {
  const double t0 = now_s();
  const ModelConfig& cfg = job.plan.config;
  if (o.specs.empty()) return err("gptq recovery: no specs to measure");
  GptqRecovery rec;
  rec.specs = o.specs;
  rec.layers = recovery_layers(cfg.num_hidden_layers, o.sample_layers);
  if (rec.layers.empty()) return err("gptq recovery: the model has no decoder layers");
  CalibSet few = calib;
  rec.rows = std::min(o.rows, calib.rows());
  rec.seq_len = calib.seq_len;
  few.tokens.resize(static_cast<size_t>(rec.rows * calib.seq_len));

  // Σ log(gptq/rtn) and the modules counted, per role and spec.
  std::map<TensorRole, std::vector<std::pair<double, int64_t>>> log_sum;
  std::map<std::string, TensorRole> role_of;
  for (const PlanEntry& e : job.plan.entries) role_of[e.name] = e.kind->role;
  const DType dtype = job.plan.dtype;

  GptqDriverOptions d;
  d.gptq = o.gptq;
  d.probe_layers = {rec.layers.begin(), rec.layers.end()};
  // GPTQ against RTN for one module (or a sample of its rows) of `role`, at every spec.
  auto sample = [&](TensorRole role, const FloatTensor& w, std::span<const double> h) -> Status {
    const int64_t rows = w.shape[0], cols = w.shape[1];
    auto& sums = log_sum[role];
    sums.resize(rec.specs.size());
    for (size_t i = 0; i < rec.specs.size(); ++i) {
      const QuantSpec& s = rec.specs[i];
      if (cols % s.group_size != 0) continue;  // the table has no such option either
      TQ_TRY(GptqResult g, gptq_quantize(w.data, rows, cols, h, s, dtype, o.gptq));
      TQ_TRY(RtnResult q, rtn_quantize(w.data, rows, cols, s, dtype, GridChoice::kMinMax));
      const double rtn = gptq_proxy_loss(w.data, q.dequantized, rows, cols, h);
      // A module RTN quantizes without loss (constant groups) says nothing about the role.
      if (rtn > 0 && g.proxy_loss > 0) {
        sums[i].first += std::log(g.proxy_loss / rtn);
        ++sums[i].second;
      }
    }
    ++rec.modules;
    return ok_status();
  };
  d.probe = [&](int64_t, const std::string& name, const FloatTensor& w,
                std::span<const double> h) -> Status {
    auto r = role_of.find(name);
    if (r == role_of.end()) return err("gptq recovery: '{}' is not in the plan", name);
    return sample(r->second, w, h);
  };
  FloatPass::Names names;
  bool head_quantized = false;  // an untied head the plan quantizes: GPTQ conversions do
  for (const TensorKind& k : family_table(cfg.family)) {
    if (k.role == TensorRole::kEmbed) names.embed = tensor_name(k, -1);
    if (k.role == TensorRole::kLmHead) names.head = tensor_name(k, -1);
    if (k.role == TensorRole::kNormFinal) names.norm = tensor_name(k, -1);
  }
  TensorRole head_role = TensorRole::kLmHead;
  for (const PlanEntry& e : job.plan.entries) {
    if (e.kind->role == TensorRole::kLmHead && e.spec) head_quantized = true;
    if (e.kind->role == TensorRole::kEmbed && e.spec && cfg.tie_word_embeddings &&
        o.tied_head_ridge > 0.0) {
      head_quantized = true;
      head_role = TensorRole::kEmbed;
      names.head = names.embed;
    }
  }
  TQ_TRY(std::unique_ptr<GptqDriver> driver, GptqDriver::create(cfg, few, std::move(d)));
  const std::set<int64_t> sampled(rec.layers.begin(), rec.layers.end());
  FloatPass pass(
      driver.get(), names, cfg.num_hidden_layers, rec.layers.back(),
      head_quantized ? o.head_rows : 0,
      [&](int64_t layer) {
        if (o.log && sampled.count(layer))
          o.log(fmt::format("layer {}/{} sampled ({:.0f} s)", layer + 1, cfg.num_hidden_layers,
                            now_s() - t0));
      },
      [&](const FloatTensor& head, std::span<const double> h) -> Status {
        std::vector<double> hr(h.begin(), h.end());
        if (head_role == TensorRole::kEmbed) add_ridge(hr, head.shape[1], o.tied_head_ridge);
        TQ_CHECK_OK(sample(head_role, head, hr));
        if (o.log)
          o.log(fmt::format("{} sampled, {} rows ({:.0f} s)",
                            head_role == TensorRole::kEmbed ? "tied head" : "lm_head",
                            head.shape[0], now_s() - t0));
        return ok_status();
      });
  ConvertOptions co;
  co.source = job.source.path;
  co.dest = job.source.path;  // named in messages only: nothing is written
  co.write_output = false;
  TQ_TRY(ConvertSummary unused, run_convert(job, pass, co));
  for (const auto& [role, sums] : log_sum) {
    std::vector<double>& f = rec.factor[role];
    for (const auto& [sum, n] : sums)
      f.push_back(n > 0 ? std::exp(sum / static_cast<double>(n)) : 1.0);
  }
  rec.seconds = now_s() - t0;
  return rec;
}

}  // namespace tq
