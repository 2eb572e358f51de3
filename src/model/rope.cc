#include "model/rope.h"

#include <cmath>
#include <numbers>

#include "kernels/ops.h"

namespace tq {

Result<std::vector<double>> rope_inv_freq(const ModelConfig& cfg) {
  const int64_t h = cfg.rotary_dims();  // qwen3_5: partial rotary, frequencies over those dims
  if (h <= 0 || h % 2 != 0) return err("rotary dims {} is not a positive even number", h);
  std::string type = cfg.rope_scaling ? cfg.rope_scaling->type : "default";
  if (type != "default" && type != "linear" && type != "llama3")
    return err("rope_scaling type '{}' is not supported by the runtime (default, linear, llama3)",
               type);
  std::vector<double> inv(static_cast<size_t>(h / 2));
  for (int64_t i = 0; i < h / 2; ++i) {
    // mlx-lm keeps the period divisor p = base^(2i/h): angle = pos / p.
    double p = std::pow(cfg.rope_theta, static_cast<double>(2 * i) / static_cast<double>(h));
    if (type == "linear") {
      p *= cfg.rope_scaling->factor;  // scale = 1/factor on the angle
    } else if (type == "llama3") {
      const RopeScaling& s = *cfg.rope_scaling;
      double old = static_cast<double>(s.original_max_position_embeddings);
      double lo = old / s.low_freq_factor, hi = old / s.high_freq_factor;
      double wavelen = 2.0 * std::numbers::pi * p;
      if (wavelen > lo) {
        p *= s.factor;
      } else if (wavelen > hi && wavelen < lo) {
        double smooth =
            (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        p /= (1.0 - smooth) / s.factor + smooth;
      }
    }
    inv[static_cast<size_t>(i)] = 1.0 / p;
  }
  return inv;
}

void rope_table(const std::vector<double>& inv_freq, int64_t p0, int64_t n, float* cos,
                float* sin) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (int64_t i = 0; i < n; ++i)
    rope_angles(inv_freq.data(), half, p0 + i, cos + i * half, sin + i * half);
}

void rope_rows(const ModelConfig& c, const float* cos, const float* sin, int64_t n, int64_t r0,
               int64_t r1, float* q, float* k) {
  const int64_t hd = c.head_dim, rd = c.rotary_dims(), half = rd / 2;
  const int64_t qd = c.num_attention_heads * hd, kvd = c.num_key_value_heads * hd;
  for (int64_t r = r0; r < r1; ++r) {
    const float* cr = cos + (r % n) * half;
    const float* sr = sin + (r % n) * half;
    // The first rd dims of each head turn; the rest pass through.
    for (int64_t h = 0; h < c.num_attention_heads; ++h)
      rope_rotate(q + r * qd + h * hd, rd, cr, sr, c.rope_traditional);
    for (int64_t h = 0; h < c.num_key_value_heads; ++h)
      rope_rotate(k + r * kvd + h * hd, rd, cr, sr, c.rope_traditional);
  }
}

}  // namespace tq
