#include "quant/channel_scale.h"

#include <algorithm>
#include <cmath>

#include "quant/gptq.h"

namespace tq {

std::vector<float> channel_scale_for(std::span<const double> h_diag, double alpha) {
  double top = 0.0;
  for (double h : h_diag) top = std::max(top, std::sqrt(std::max(h, 0.0)));
  const double floor = top > 0.0 ? 1e-5 * top : 1.0;
  std::vector<double> s(h_diag.size());
  double lo = INFINITY, hi = 0.0;
  for (size_t j = 0; j < s.size(); ++j) {
    s[j] = std::pow(std::max(std::sqrt(std::max(h_diag[j], 0.0)), floor), alpha);
    lo = std::min(lo, s[j]);
    hi = std::max(hi, s[j]);
  }
  const double centre = s.empty() ? 1.0 : std::sqrt(lo * hi);
  std::vector<float> out(s.size());
  for (size_t j = 0; j < s.size(); ++j) out[j] = static_cast<float>(s[j] / centre);
  return out;
}

namespace {

Result<double> scaled_error(std::span<const FloatTensor* const> ws, std::span<const double> h_diag,
                            std::span<const float> s, const QuantSpec& spec, DType dtype) {
  double e = 0.0;
  std::vector<float> scaled;
  for (const FloatTensor* w : ws) {
    const int64_t rows = w->shape[0], cols = w->shape[1];
    scaled.resize(w->data.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) scaled[i * cols + j] = w->data[i * cols + j] * s[j];
    TQ_TRY(RtnResult q, rtn_quantize(scaled, rows, cols, spec, dtype));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const double d = double(q.dequantized[i * cols + j]) / s[j] - w->data[i * cols + j];
        e += d * d * h_diag[j];
      }
  }
  return e;
}

}  // namespace

Result<ChannelScaleFit> fit_channel_scale(std::span<const FloatTensor* const> ws,
                                          std::span<const double> h_diag, const QuantSpec& spec,
                                          DType dtype, int steps) {
  const int64_t cols = static_cast<int64_t>(h_diag.size());
  if (ws.empty()) return err("channel scale: no matrices");
  for (const FloatTensor* w : ws)
    if (w->shape.size() != 2 || w->shape[1] != cols)
      return err("channel scale: a matrix of shape {} does not read {} channels",
                 shape_str(w->shape), cols);
  if (steps < 1) return err("channel scale: {} alpha steps", steps);
  ChannelScaleFit best;  // alpha 0 (s = 1) first; a tie keeps the smaller alpha
  for (int k = 0; k <= steps; ++k) {
    const double alpha = static_cast<double>(k) / steps;
    std::vector<float> s = channel_scale_for(h_diag, alpha);
    TQ_TRY(double e, scaled_error(ws, h_diag, s, spec, dtype));
    if (k == 0) best.error_unscaled = e;
    if (k == 0 || e < best.error) {
      best.alpha = alpha;
      best.scale = std::move(s);
      best.error = e;
    }
  }
  return best;
}

}  // namespace tq
