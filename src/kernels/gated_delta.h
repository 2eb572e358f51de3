// Gated DeltaNet (qwen3_5's linear attention, docs/QWEN35.md) in f32: the causal depthwise
// conv with its state, and the gated delta rule over a constant-size state, token by token or
// in chunks (the WY / UT form). Scalar references, as mlx-lm's gated_delta.py computes them.
#pragma once

#include <cstdint>

namespace tq {

struct GatedDeltaDims {
  int64_t hk = 0, hv = 0, dk = 0, dv = 0;  // key heads, value heads (a multiple), head dims
  int64_t key_dim() const { return hk * dk; }
  int64_t value_dim() const { return hv * dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t state_size() const { return hv * dv * dk; }
};

// x [n, C] <- silu(causal depthwise conv of [state; x]): out[t, c] = sum_j w[c, j] in[t + j, c]
// over the K-1 state rows followed by x (w[c, K-1] multiplies the current token); state
// [K-1, C] <- the last K-1 rows of [state; x] before the conv. Only channels [c0, c1) (c1 < 0:
// all), so that callers may split the channels over threads.
void causal_conv1d_silu(const float* w, int64_t channels, int64_t kernel, float* state, float* x,
                        int64_t n, int64_t c0 = 0, int64_t c1 = -1);

// The gated delta rule over n tokens of one sequence. qkv [n, C] holds each token's conv
// output [q (hk·dk) | k (hk·dk) | v (hv·dv)]; q and k are l2-normalized in place (q also scaled
// by dk^-1/2). b, a [n, hv] are in_proj_b / in_proj_a outputs: beta = sigmoid(b),
// g = exp(-exp(a_log) softplus(a + dt_bias)). Value head h reads key head h / (hv / hk).
// state [hv, dv, dk]: S <- g S; S <- S + beta (v - S k) k^T; y [n, hv·dv] = S q.
// chunk <= 1: token by token; else chunks of `chunk` tokens in the WY form (same result up to
// rounding; faster for long prompts).
void gated_delta_rule(const GatedDeltaDims& d, float* qkv, const float* b, const float* a,
                      const float* a_log, const float* dt_bias, float* state, int64_t n, float* y,
                      int64_t chunk = 0);

// The chunked form for value heads [h0, h1) only, on q and k already normalized (as
// gated_delta_steps). blas_solve = false: the unit-triangular solve by scalar forward
// substitution (the reference) instead of OpenBLAS's strsm.
void gated_delta_chunks(const GatedDeltaDims& d, const float* qkv, const float* b, const float* a,
                        const float* a_log, const float* dt_bias, float* state, int64_t n, float* y,
                        int64_t chunk, int64_t h0, int64_t h1, bool blas_solve = true);

// gated_delta_rule in two steps, for callers that split the value heads over threads: q and k
// of qkv [n, C] l2-normalized in place, then the token-by-token rule for value heads [h0, h1)
// only (each reads its own state [dv, dk] and writes its own y columns).
void gated_delta_normalize_qk(const GatedDeltaDims& d, float* qkv, int64_t n);
void gated_delta_steps(const GatedDeltaDims& d, const float* qkv, const float* b, const float* a,
                       const float* a_log, const float* dt_bias, float* state, int64_t n, float* y,
                       int64_t h0, int64_t h1);

// y [rows, dv] <- rms_norm(y) · w ⊙ silu(z): the gated RMSNorm over each value head.
void gated_rms_norm(float* y, const float* z, const float* w, int64_t rows, int64_t dv, float eps);

}  // namespace tq
