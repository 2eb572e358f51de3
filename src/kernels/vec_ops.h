// Small SIMD vector primitives (Highway, run-time dispatch) and attention over the fast
// runtime's KV cache. The cache holds f32 or f16 (IEEE half, as uint16_t bits) elements. Keys of
// one KV head in blocks of 16 positions, transposed within the block:
//   kt[(j / 16) * hd * 16 + d * 16 + j % 16]
// (the scores of consecutive positions are one vector, no horizontal sums, and a block is one
// contiguous read); values in rows, v[j * vld + d].
#pragma once

#include <cstdint>

namespace tq {

// Σ x[i] read as four streams over distant parts of x (software prefetch ahead), as the
// decode kernels read a model from DRAM: the bandwidth measure of `tq bench`.
float stream_sum_f32(const float* x, int64_t n);

// max_i x[i] (n >= 1); x[i] <- exp(x[i] - m), returning Σ x[i] (terms below e^-87 become 0);
// kernels/ops.h softmax with those two, in vectors (the sum in f32).
float max_simd(const float* x, int64_t n);
float exp_sub_sum_simd(float* x, int64_t n, float m);
void softmax_simd(float* x, int64_t n);

// gate[i] <- gate[i] / (1 + exp(-gate[i])) * up[i] (kernels/ops.h silu_mul), in vectors.
void silu_mul_simd(float* gate, const float* up, int64_t n);

// kernels/ops.h rms_norm (out may equal x), in vectors with an f32 sum of squares.
void rms_norm_simd(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* out);

// f32 <-> f16 bits (round to nearest even), in vectors.
void f32_to_f16_n(const float* x, int64_t n, uint16_t* out);
void f16_to_f32_n(const uint16_t* x, int64_t n, float* out);

// Decode attention of the g query heads that share one KV head (q: g rows of hd) over the
// positions [j0, j1) of the cache, as a partial softmax to be merged across position ranges:
//   m[i] = max_j s_ij,  l[i] = Σ_j exp(s_ij - m[i]),  acc[i * hd + d] = Σ_j exp(s_ij - m[i]) v_jd
// with s_ij = scale · q_i · k_j. j0 must be a multiple of 16 (score tiles read whole blocks, up
// to j1 rounded up to 16). `scores`: g * (j1 - j0 + 16) floats of scratch.
void attend_partial(const float* q, int64_t g, int64_t hd, const float* kt, const float* v,
                    int64_t vld, int64_t j0, int64_t j1, float scale, float* scores, float* m,
                    float* l, float* acc);
void attend_partial(const float* q, int64_t g, int64_t hd, const uint16_t* kt, const uint16_t* v,
                    int64_t vld, int64_t j0, int64_t j1, float scale, float* scores, float* m,
                    float* l, float* acc);

// Prefill attention of nr query rows (strided by qld) that share one KV head: row i sees the
// positions [0, len[i]) of the cache (blocks read up to the largest len rounded up to 16); out
// row i at out + i * old. Rows go four at a time with the keys and values read once per four,
// and a row's result does not depend on its neighbours. `scores`: 4 * (max len + 16) floats.
void attend_rows(const float* q, int64_t nr, int64_t qld, const int64_t* len, const float* kt,
                 const float* v, int64_t vld, int64_t hd, float scale, float* scores, float* out,
                 int64_t old);
void attend_rows(const float* q, int64_t nr, int64_t qld, const int64_t* len, const uint16_t* kt,
                 const uint16_t* v, int64_t vld, int64_t hd, float scale, float* scores, float* out,
                 int64_t old);

}  // namespace tq
