// Activation-aware channel scaling (issue 28 item 3): matrices that read one input x get
// their columns multiplied by s and the producer of x (a norm's γ, or the previous linear's
// rows) divided by s, so the float function is unchanged while channels that carry large
// activations get finer quantization steps. s = m^α with m the input's RMS per channel, α
// chosen on a grid to minimise the quantization error weighted by E[x²] (docs/CHANNEL_SCALE.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "tensor/tensor.h"

namespace tq {

struct ChannelScaleFit {
  double alpha = 0.0;
  std::vector<float> scale;     // s [cols]; the consumer's columns * s, the producer / s
  double error = 0.0;           // Σ_w Σ_ij (Q(W·s)/s − W)²_ij · h_jj at alpha
  double error_unscaled = 0.0;  // the same at alpha = 0 (s = 1)
};

// The scale vector for alpha: m = sqrt(h_diag) floored at 1e-5 · max m (a dead channel), s =
// m^alpha divided by sqrt(max s · min s) so that it is centred on 1.
std::vector<float> channel_scale_for(std::span<const double> h_diag, double alpha);

// Searches alpha in {0, 1/steps, ..., 1} for the matrices `ws` (each [rows_i, cols], one
// shared input) against h_diag (E[x²] per input channel, any positive multiple), each matrix
// RTN-quantized (min/max grid) at `spec` after rounding to `dtype`. alpha 0 wins ties.
Result<ChannelScaleFit> fit_channel_scale(std::span<const FloatTensor* const> ws,
                                          std::span<const double> h_diag, const QuantSpec& spec,
                                          DType dtype, int steps = 20);

}  // namespace tq
