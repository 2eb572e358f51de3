// Small SIMD vector primitives (Highway, run-time dispatch) for attention over the KV cache.
#pragma once

#include <cstdint>

namespace tq {

float dot_f32(const float* a, const float* b, int64_t n);     // Σ a[i]·b[i]
void axpy_f32(float a, const float* x, float* y, int64_t n);  // y[i] += a·x[i]

// Decode-time attention of one query head over `len` cached positions:
//   out[hd] = softmax(scale · K[0..len) · q) · V[0..len),  K, V rows strided by `ld` floats.
// `scores` holds len floats of scratch.
void attend_one(const float* q, const float* k, const float* v, int64_t len, int64_t ld, int64_t hd,
                float scale, float* scores, float* out);

}  // namespace tq
