#include "kernels/attention.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "kernels/ops.h"

namespace tq {

void causal_attention(const float* q, const float* k, const float* v, int64_t n, int64_t p0,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                      float* out) {
  const int64_t total = p0 + n, group = n_heads / n_kv_heads;
  const int q_ld = static_cast<int>(n_heads * head_dim),
            kv_ld = static_cast<int>(n_kv_heads * head_dim);
  std::vector<float> s(static_cast<size_t>(n * total));  // [n, total] scores, then weights
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t g = h / group;
    // s[n, total] = scale · q_h[n, hd] · K_g[total, hd]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
                static_cast<int>(total), static_cast<int>(head_dim), scale, q + h * head_dim, q_ld,
                k + g * head_dim, kv_ld, 0.0f, s.data(), static_cast<int>(total));
    for (int64_t i = 0; i < n; ++i) {
      float* row = s.data() + i * total;
      const int64_t len = p0 + i + 1;  // query i sees positions 0 .. p0+i
      softmax(row, len);
      std::fill(row + len, row + total, 0.0f);
    }
    // out_h[n, hd] = s[n, total] · V_g[total, hd]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n),
                static_cast<int>(head_dim), static_cast<int>(total), 1.0f, s.data(),
                static_cast<int>(total), v + g * head_dim, kv_ld, 0.0f, out + h * head_dim, q_ld);
  }
}

}  // namespace tq
