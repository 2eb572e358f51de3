// Measuring the sensitivity table: for each quantizable module and candidate spec, quantize
// only that module (RTN on mx.quantize's grid, then dequantized as mx.dequantize) and measure
// the mean KL(reference || quantized) of the next-token distributions on calibration windows.
//
// Cost: the reference residual stream entering every layer (and after every attention half) is
// cached per window, so a module of layer L re-runs only layers L..end (an MLP module only the
// MLP half of L) plus the head; a module's specs and windows go through them as one batch.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/result.h"
#include "model/f32_model.h"
#include "recipe/sensitivity.h"

namespace tq {

// Calibration windows: `count` independent windows of `seq_len` tokens; positions
// first_target..seq_len-1 are scored (from logits rows first_target-1..seq_len-2).
struct CalibWindows {
  std::vector<int32_t> tokens;  // [count, seq_len]
  int64_t seq_len = 0;
  int64_t count = 0;
  int64_t first_target = 1;
};

// Every quantizable module of the model, in model order, as table rows without specs.
std::vector<ModuleSensitivity> quantizable_modules(const ModelConfig& cfg, DType dtype);

// w [rows, cols] rounded to `dtype`, quantized at `spec` and dequantized back to f32.
Result<std::vector<float>> rtn_roundtrip(std::span<const float> w, int64_t rows, int64_t cols,
                                         const QuantSpec& spec, DType dtype);

class SensitivityMeter {
 public:
  // Runs the reference over every window and keeps what the measurements reuse.
  static Result<SensitivityMeter> prepare(const F32Model& runner, const CalibWindows& w);
  // Mean KL per scored token with module `m` replaced by `w_module` (its shape).
  double mean_kl(const ModuleSensitivity& m, std::span<const float> w_module) const;
  // The same for several replacements of the module at once (one batch through the network).
  std::vector<double> mean_kls(const ModuleSensitivity& m,
                               std::span<const float* const> variants) const;
  // Fills m.specs for `specs` (skipping specs whose group does not divide the input width),
  // all specs in one batch; `step()` is called once per spec at the end. Const: several threads
  // may measure different modules at once.
  // An affine spec wider than `scale_above_bits` (> 0) is not run through the network when a
  // narrower affine spec of the same group (at most scale_above_bits) is: its KL is that
  // spec's times the ratio of squared weight errors (both deep in the regime where KL is
  // quadratic in the error).
  Status measure(ModuleSensitivity& m, std::span<const QuantSpec> specs, DType dtype,
                 const std::function<void()>& step, int scale_above_bits = 0) const;

 private:
  SensitivityMeter() = default;
  const F32Model* runner_ = nullptr;
  const CalibWindows* w_ = nullptr;
  // [layers + 1][count][seq_len * d]: residual entering layer l (l = layers: after the last)
  std::vector<std::vector<std::vector<float>>> x_in_;
  std::vector<std::vector<std::vector<float>>> x_mid_;  // [layers][count]: after attention
  // Sum over window k's scored rows of KL(reference || softmax(logits row)); logits [n, vocab].
  double window_kl(const float* logits, int64_t k) const;
  std::vector<std::vector<float>> p_ref_;  // [count][scored * vocab]: reference probabilities
  std::vector<std::vector<double>> neg_entropy_;  // [count][scored]: sum p log p
};

}  // namespace tq
