#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tq {

void rms_norm(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    float* o = out + r * d;
    for (int64_t i = 0; i < d; ++i) o[i] = xr[i] * inv * w[i];
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void softmax(float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void rope_angles(const double* inv_freq, int64_t half, int64_t pos, float* cos_out,
                 float* sin_out) {
  for (int64_t i = 0; i < half; ++i) {
    double theta = static_cast<double>(pos) * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(theta));
    sin_out[i] = static_cast<float>(std::sin(theta));
  }
}

void rope_rotate(float* x, int64_t head_dim, const float* cos, const float* sin, bool traditional) {
  int64_t half = head_dim / 2;
  if (!traditional) {  // two halves: a loop the compiler vectorizes (the same operations)
    float* __restrict a = x;
    float* __restrict b = x + half;
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = a[i], x2 = b[i];
      a[i] = x1 * cos[i] - x2 * sin[i];
      b[i] = x1 * sin[i] + x2 * cos[i];
    }
    return;
  }
  for (int64_t i = 0; i < half; ++i) {
    float* a = traditional ? x + 2 * i : x + i;
    float* b = traditional ? x + 2 * i + 1 : x + i + half;
    float x1 = *a, x2 = *b;
    *a = x1 * cos[i] - x2 * sin[i];
    *b = x1 * sin[i] + x2 * cos[i];
  }
}

}  // namespace tq
