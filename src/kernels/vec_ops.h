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

// Keys of one KV head transposed for attend_block: kt[d * lpad + j] = k[j * ld + d] for j < len,
// zero for len <= j < lpad.
void transpose_keys(const float* k, int64_t len, int64_t ld, int64_t hd, int64_t lpad, float* kt);

// Prefill attention of nq (<= 8) consecutive queries of one head (rows strided by qld): query i
// sees positions [0, len0 + i) of the keys k (kt: them transposed, row length lpad, a multiple
// of 16 >= len0 + nq - 1) and of V (k and V rows strided by ld); out row i at out + i * old.
// As attend_one per query, up to f32 rounding. `scores`: nq * (len0 + nq + 16) floats.
void attend_block(const float* q, int64_t nq, int64_t qld, const float* k, const float* kt,
                  int64_t lpad, const float* v, int64_t ld, int64_t hd, int64_t len0, float scale,
                  float* scores, float* out, int64_t old);

}  // namespace tq
