// Grouped-query causal attention in f32, per head through OpenBLAS GEMMs.
#pragma once

#include <cstdint>

namespace tq {

// n new queries at positions p0 .. p0+n-1 attend to keys/values of positions 0 .. p0+n-1:
//   out_h = softmax(scale · q_h · K_g^T + causal mask) · V_g,   g = h / (n_heads / n_kv_heads).
// q, out [n, n_heads * head_dim]; k, v [p0 + n, n_kv_heads * head_dim]; all row-major, dense.
void causal_attention(const float* q, const float* k, const float* v, int64_t n, int64_t p0,
                      int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                      float* out);

}  // namespace tq
