// Plain f32 reference kernels of the transformer forward pass (llama2.c style): one loop each,
// shapes in the comments. The matrix products are in kernels/matmul.h.
#pragma once

#include <cstdint>

namespace tq {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w   for r < rows; x, out [rows, d].
// The mean is accumulated in double; x and out may alias.
void rms_norm(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* out);

// gate[i] <- silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], i < n.
void silu_mul(float* gate, const float* up, int64_t n);

// x[0..n) <- softmax(x[0..n)), with the max subtracted first; n >= 1.
void softmax(float* x, int64_t n);

// cos_out[i], sin_out[i] of theta_i = pos · inv_freq[i] for i < half (angle in double).
void rope_angles(const double* inv_freq, int64_t half, int64_t pos, float* cos_out, float* sin_out);

// Rotary embedding of one head vector x[head_dim] by the angles of rope_angles (half =
// head_dim/2). Rotate-half layout (HF, mlx traditional=False) pairs (i, i + half); the
// traditional layout pairs (2i, 2i+1).
void rope_rotate(float* x, int64_t head_dim, const float* cos, const float* sin, bool traditional);

}  // namespace tq
