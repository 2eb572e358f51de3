// Channel scaling as a conversion stage (issue 28 item 3, quant/channel_scale.h): the float
// model, its rotation folded when asked, runs over calibration rows; per decoder layer the
// three points whose producer can absorb 1/s exactly get a scale vector:
//   attn  input norm γ / s          -> q, k, v columns · s
//   mlp   post-attention norm γ / s -> gate, up columns · s
//   down  up rows / s               -> down columns · s   (no MLP bias)
// write_scaled_float() writes the scaled f32 model; tq convert then quantizes it as a source,
// so sensitivity, allocation and GPTQ see the scaled weights (docs/CHANNEL_SCALE.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "model/weight_stages.h"
#include "quant/calib.h"
#include "rotate/fold_plan.h"

namespace tq {

enum class ScalePoint : uint8_t { kAttn, kMlp, kDown };
inline constexpr int kScalePoints = 3;

struct LayerScales {
  std::vector<float> scale[kScalePoints];  // empty: that point is not scaled
  double alpha[kScalePoints] = {0, 0, 0};
  double error_ratio[kScalePoints] = {1, 1, 1};  // weighted RTN error scaled / unscaled
};

struct ChannelScales {
  QuantSpec spec;  // the width the alpha search quantized at
  int64_t rows = 0, seq_len = 0;
  std::string calib_sha256;
  std::vector<LayerScales> layers;
  double seconds = 0.0;
  nlohmann::json to_json() const;  // per point: mean alpha, mean error ratio; per layer alphas
};

struct ChannelScaleOptions {
  QuantSpec spec;                               // e.g. affine 4-bit g64 for a 4-bit conversion
  DType dtype = DType::kBF16;                   // the conversion's scale dtype
  int64_t rows = 32;                            // the calibration set's first rows
  int steps = 20;                               // alpha in {0, 1/steps, ..., 1}
  std::function<void(const std::string&)> log;  // one line per layer
};

// Why a model cannot be scaled (family, MLP bias), or ok.
Status check_channel_scalable(const ModelConfig& cfg);

// Applies the scales to each layer's tensors (output names), after any rotation.
class ChannelScaleTransform : public WeightTransform {
 public:
  ChannelScaleTransform(const ModelConfig& cfg, ChannelScales scales);
  std::vector<std::string> describe() const override;
  Status edit_config(nlohmann::json&) const override { return ok_status(); }
  Status apply_globals(TensorMap&) override { return ok_status(); }
  Status apply_layer(int64_t layer, TensorMap& t) override;
  nlohmann::json metadata() const override;

 private:
  ModelConfig cfg_;
  ChannelScales s_;
};

// source -> (rotation) -> channel scales measured on `calib` -> f32 model at dest (replaced if
// present, published atomically); the scales' summary goes into its tq_metadata.json.
Status write_scaled_float(const std::string& source, const std::optional<RotationOptions>& ro,
                          const CalibSet& calib, const ChannelScaleOptions& o,
                          const std::string& dest);

}  // namespace tq
