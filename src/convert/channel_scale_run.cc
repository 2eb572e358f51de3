#include "convert/channel_scale_run.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>

#include "convert/convert.h"
#include "convert/float_pass.h"
#include "convert/fold_float.h"
#include "model/model_source.h"
#include "quant/channel_scale.h"
#include "rotate/rotation_transform.h"

namespace tq {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr const char* kPointName[kScalePoints] = {"attn", "mlp", "down"};

// The point a matrix of `role` reads from (as consumer), or -1.
int consumer_point(TensorRole role) {
  switch (role) {
    case TensorRole::kAttnQ:
    case TensorRole::kAttnK:
    case TensorRole::kAttnV:
      return static_cast<int>(ScalePoint::kAttn);
    case TensorRole::kMlpGate:
    case TensorRole::kMlpUp:
      return static_cast<int>(ScalePoint::kMlp);
    case TensorRole::kMlpDown:
      return static_cast<int>(ScalePoint::kDown);
    default:
      return -1;
  }
}

// The tensor that absorbs 1/s at each point, and whether it is a norm (γ) or rows of a matrix.
TensorRole producer_role(int point) {
  switch (static_cast<ScalePoint>(point)) {
    case ScalePoint::kAttn:
      return TensorRole::kNormAttn;
    case ScalePoint::kMlp:
      return TensorRole::kNormMlp;
    case ScalePoint::kDown:
      return TensorRole::kMlpUp;
  }
  return TensorRole::kNormAttn;
}

}  // namespace

Status check_channel_scalable(const ModelConfig& cfg) {
  if (cfg.family != Family::kLlama && cfg.family != Family::kQwen2 && cfg.family != Family::kQwen3)
    return err("channel scaling supports the llama, qwen2 and qwen3 families, not {}",
               family_name(cfg.family));
  if (cfg.mlp_bias) return err("channel scaling needs an MLP without bias (mlp_bias is true)");
  return ok_status();
}

nlohmann::json ChannelScales::to_json() const {
  nlohmann::json points = nlohmann::json::object();
  for (int p = 0; p < kScalePoints; ++p) {
    double a = 0, r = 0;
    nlohmann::json alphas = nlohmann::json::array();
    for (const LayerScales& l : layers) {
      a += l.alpha[p];
      r += l.error_ratio[p];
      alphas.push_back(l.alpha[p]);
    }
    const double n = layers.empty() ? 1.0 : static_cast<double>(layers.size());
    points[kPointName[p]] = {{"mean_alpha", a / n}, {"mean_error_ratio", r / n}, {"alpha", alphas}};
  }
  return {{"method",
           "s = rms(x)^alpha per input channel, alpha searched against E[x^2]-weighted RTN error"},
          {"spec", quant_spec_str(spec)},
          {"rows", rows},
          {"seq_len", seq_len},
          {"calib_sha256", calib_sha256},
          {"seconds", seconds},
          {"points", points}};
}

ChannelScaleTransform::ChannelScaleTransform(const ModelConfig& cfg, ChannelScales scales)
    : cfg_(cfg), s_(std::move(scales)) {}

std::vector<std::string> ChannelScaleTransform::describe() const {
  return {fmt::format("channel scaling: {} layers, alpha searched at {}", s_.layers.size(),
                      quant_spec_str(s_.spec))};
}

nlohmann::json ChannelScaleTransform::metadata() const {
  nlohmann::json j = s_.to_json();
  j["transform"] = "channel_scale";
  return j;
}

Status ChannelScaleTransform::apply_layer(int64_t layer, TensorMap& t) {
  if (layer < 0 || layer >= static_cast<int64_t>(s_.layers.size()))
    return err("channel scaling: no scales for layer {}", layer);
  const LayerScales& ls = s_.layers[static_cast<size_t>(layer)];
  for (const TensorKind& k : family_table(cfg_.family)) {
    const int cp = consumer_point(k.role);
    int pp = -1;
    for (int p = 0; p < kScalePoints; ++p)
      if (producer_role(p) == k.role) pp = p;
    if (cp < 0 && pp < 0) continue;
    auto it = t.find(tensor_name(k, layer));
    if (it == t.end()) continue;
    FloatTensor& w = it->second;
    if (cp >= 0 && !ls.scale[cp].empty()) {  // columns · s
      const auto& s = ls.scale[cp];
      const size_t cols = s.size();
      if (w.shape.size() != 2 || static_cast<size_t>(w.shape[1]) != cols)
        return err("channel scaling: '{}' has shape {}, expected {} columns", it->first,
                   shape_str(w.shape), cols);
      for (size_t i = 0; i < w.data.size(); ++i) w.data[i] *= s[i % cols];
    }
    if (pp >= 0 && !ls.scale[pp].empty()) {  // γ / s, or rows / s
      const auto& s = ls.scale[pp];
      const size_t n = s.size();
      if (w.shape.empty() || static_cast<size_t>(w.shape[0]) != n)
        return err("channel scaling: '{}' has shape {}, expected {} rows", it->first,
                   shape_str(w.shape), n);
      const size_t row = w.data.size() / n;
      for (size_t i = 0; i < w.data.size(); ++i) w.data[i] /= s[i / row];
    }
  }
  return ok_status();
}

namespace {

// The rotation of `source` when asked (owned here; the transform list points at it).
struct OwnedRotation {
  std::unique_ptr<RotationTransform> transform;
  std::vector<WeightTransform*> list;
};
Result<OwnedRotation> rotation_for(const std::string& source,
                                   const std::optional<RotationOptions>& ro) {
  OwnedRotation r;
  if (!ro) return r;
  TQ_TRY(ModelSource src, open_model(source));
  TQ_TRY(r.transform, RotationTransform::create(src.config, *ro));
  r.list.push_back(r.transform.get());
  return r;
}

Result<ChannelScales> measure(const std::string& source, const std::optional<RotationOptions>& ro,
                              const CalibSet& calib, const ChannelScaleOptions& o) {
  const double t0 = now_s();
  TQ_TRY(OwnedRotation rot, rotation_for(source, ro));
  ConvertOptions fo;
  fo.source = source;
  fo.dest = source;  // named in messages only: nothing is written
  fo.dtype = DType::kF32;
  fo.plan.keep_float = {"*"};
  fo.write_output = false;
  TQ_TRY(ConvertJob job, prepare_convert(fo, rot.list));
  const ModelConfig& cfg = job.plan.config;
  TQ_CHECK_OK(check_channel_scalable(cfg));
  ChannelScales out;
  out.spec = o.spec;
  out.rows = std::min(o.rows, calib.rows());
  out.seq_len = calib.seq_len;
  out.calib_sha256 = calib.sha256;
  out.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  CalibSet few = calib;
  few.tokens.resize(static_cast<size_t>(out.rows * calib.seq_len));

  std::map<std::string, TensorRole> role_of;
  for (const PlanEntry& e : job.plan.entries) role_of[e.name] = e.kind->role;
  // One layer's consumers and their input's E[x²], gathered by the probe.
  struct Point {
    std::vector<FloatTensor> ws;
    std::vector<double> h_diag;
  };
  Point pts[kScalePoints];
  GptqDriverOptions d;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) d.probe_layers.insert(l);
  d.probe = [&](int64_t, const std::string& name, const FloatTensor& w,
                std::span<const double> h) -> Status {
    auto r = role_of.find(name);
    if (r == role_of.end()) return err("channel scaling: '{}' is not in the plan", name);
    const int p = consumer_point(r->second);
    if (p < 0) return ok_status();
    Point& pt = pts[p];
    if (pt.h_diag.empty()) {
      const int64_t cols = w.shape[1];
      pt.h_diag.resize(static_cast<size_t>(cols));
      for (int64_t j = 0; j < cols; ++j) pt.h_diag[j] = h[static_cast<size_t>(j * cols + j)];
    }
    pt.ws.push_back(w);
    return ok_status();
  };
  Status fit_status = ok_status();
  auto layer_done = [&](int64_t layer) {
    LayerScales& ls = out.layers[static_cast<size_t>(layer)];
    for (int p = 0; p < kScalePoints && fit_status.ok(); ++p) {
      Point& pt = pts[p];
      if (pt.ws.empty()) continue;
      std::vector<const FloatTensor*> ws;
      for (const FloatTensor& w : pt.ws) ws.push_back(&w);
      Result<ChannelScaleFit> f = fit_channel_scale(ws, pt.h_diag, o.spec, o.dtype, o.steps);
      if (!f.ok()) {
        fit_status = Status(f.error());
        break;
      }
      ls.alpha[p] = f->alpha;
      ls.error_ratio[p] = f->error_unscaled > 0 ? f->error / f->error_unscaled : 1.0;
      if (f->alpha > 0) ls.scale[p] = std::move(f->scale);
      pt = Point{};
    }
    if (o.log)
      o.log(
          fmt::format("layer {}/{}: alpha {:.2f} {:.2f} {:.2f}, error x{:.3f} x{:.3f} x{:.3f} "
                      "({:.0f} s)",
                      layer + 1, cfg.num_hidden_layers, ls.alpha[0], ls.alpha[1], ls.alpha[2],
                      ls.error_ratio[0], ls.error_ratio[1], ls.error_ratio[2], now_s() - t0));
  };
  FloatPass::Names names;
  for (const TensorKind& k : family_table(cfg.family)) {
    if (k.role == TensorRole::kEmbed) names.embed = tensor_name(k, -1);
    if (k.role == TensorRole::kNormFinal) names.norm = tensor_name(k, -1);
  }
  TQ_TRY(std::unique_ptr<GptqDriver> driver, GptqDriver::create(cfg, few, std::move(d)));
  FloatPass pass(driver.get(), names, cfg.num_hidden_layers, cfg.num_hidden_layers - 1, 0,
                 layer_done, nullptr);
  TQ_TRY(ConvertSummary unused, run_convert(job, pass, fo));
  (void)unused;
  TQ_CHECK_OK(fit_status);
  out.seconds = now_s() - t0;
  return out;
}

}  // namespace

Status write_scaled_float(const std::string& source, const std::optional<RotationOptions>& ro,
                          const CalibSet& calib, const ChannelScaleOptions& o,
                          const std::string& dest) {
  TQ_TRY(ChannelScales scales, measure(source, ro, calib, o));
  TQ_TRY(ModelSource src, open_model(source));
  TQ_TRY(OwnedRotation rot, rotation_for(source, ro));
  ChannelScaleTransform cs(src.config, std::move(scales));
  rot.list.push_back(&cs);
  return write_float_model(source, rot.list, dest);
}

}  // namespace tq
