#include "kernels/vec_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/vec_ops.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format off: per-target, after highway.h
#include <hwy/contrib/math/math-inl.h>
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace tq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float DotImpl(const float* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto s0 = hn::Zero(df), s1 = s0;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + N), hn::LoadU(df, b + i + N), s1);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void AxpyImpl(float a, const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto av = hn::Set(df, a);
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::MulAdd(av, hn::LoadU(df, x + i), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] += a * x[i];
}

// row[j] = exp(row[j] - m) for j < len, in vectors (Highway's Exp); returns their sum.
float ExpSum(float* row, int64_t len, float m) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto mv = hn::Set(df, m);
  auto sv = hn::Zero(df);
  int64_t j = 0;
  for (; j + N <= len; j += N) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, row + j), mv));
    hn::StoreU(e, df, row + j);
    sv = hn::Add(sv, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, sv));
  for (; j < len; ++j) row[j] = std::exp(row[j] - m), sum += row[j];
  return sum;
}

// Scores, exp and the weighted sum of V rows in vectors: exp is Highway's (no scalar libm call
// per position), and each V chunk of up to kOut vectors of out stays in registers while the
// positions stream past.
void AttendImpl(const float* q, const float* k, const float* v, int64_t len, int64_t ld, int64_t hd,
                float scale, float* scores, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < len; ++j) {
    scores[j] = scale * DotImpl(q, k + j * ld, hd);
    m = scores[j] > m ? scores[j] : m;
  }
  const float inv = 1.0f / ExpSum(scores, len, m);
  if (hd % N != 0) {  // head sizes that are not a multiple of the vector width
    for (int64_t i = 0; i < hd; ++i) out[i] = 0.0f;
    for (int64_t j = 0; j < len; ++j) AxpyImpl(scores[j] * inv, v + j * ld, out, hd);
    return;
  }
  constexpr int64_t kOut = 8;
  for (int64_t i0 = 0; i0 < hd; i0 += kOut * N) {
    const int64_t nv = std::min<int64_t>(kOut, (hd - i0) / N);
    hn::Vec<decltype(df)> acc[kOut];
    for (int64_t u = 0; u < kOut; ++u) acc[u] = hn::Zero(df);
    for (int64_t j = 0; j < len; ++j) {
      const auto p = hn::Set(df, scores[j]);
      const float* vj = v + j * ld + i0;
#pragma GCC unroll 8
      for (int64_t u = 0; u < kOut; ++u)
        if (u < nv) acc[u] = hn::MulAdd(p, hn::LoadU(df, vj + u * N), acc[u]);
    }
    const auto iv = hn::Set(df, inv);
    for (int64_t u = 0; u < nv; ++u) hn::StoreU(hn::Mul(acc[u], iv), df, out + i0 + u * N);
  }
}

void TransposeKeysImpl(const float* k, int64_t len, int64_t ld, int64_t hd, int64_t lpad,
                       float* kt) {
  for (int64_t j = 0; j < len; ++j)
    for (int64_t d = 0; d < hd; ++d) kt[d * lpad + j] = k[j * ld + d];
  for (int64_t d = 0; d < hd; ++d)
    for (int64_t j = len; j < lpad; ++j) kt[d * lpad + j] = 0.0f;
}

// Up to kQ queries at once: scores of N positions per vector from the transposed keys (no
// horizontal sums), exp in vectors, then V rows streamed once per 4 queries.
void AttendBlockImpl(const float* q, int64_t nq, int64_t qld, const float* k, const float* kt,
                     int64_t lpad, const float* v, int64_t ld, int64_t hd, int64_t len0,
                     float scale, float* scores, float* out, int64_t old) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kQ = 8;
  if (hd % N != 0 || nq > kQ) {
    for (int64_t i = 0; i < nq; ++i)
      AttendImpl(q + i * qld, k, v, len0 + i, ld, hd, scale, scores, out + i * old);
    return;
  }
  const int64_t lmax = len0 + nq - 1, tiles = (lmax + N - 1) / N, lrow = tiles * N;
  // scores[i * lrow + j] = scale · q_i · k_j
  for (int64_t t = 0; t < tiles; ++t) {
    V acc[kQ];
    for (int64_t i = 0; i < kQ; ++i) acc[i] = hn::Zero(df);
    for (int64_t d = 0; d < hd; ++d) {
      const V kv = hn::LoadU(df, kt + d * lpad + t * N);
#pragma GCC unroll 8
      for (int64_t i = 0; i < kQ; ++i)
        if (i < nq) acc[i] = hn::MulAdd(hn::Set(df, q[i * qld + d]), kv, acc[i]);
    }
    const V sv = hn::Set(df, scale);
    for (int64_t i = 0; i < nq; ++i) hn::StoreU(hn::Mul(acc[i], sv), df, scores + i * lrow + t * N);
  }
  // Softmax of row i over its len0 + i positions; the rest of the row weighs 0.
  float inv[kQ];
  for (int64_t i = 0; i < nq; ++i) {
    float* row = scores + i * lrow;
    const int64_t len = len0 + i;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < len; ++j) m = row[j] > m ? row[j] : m;
    inv[i] = 1.0f / ExpSum(row, len, m);
    for (int64_t j = len; j < lrow; ++j) row[j] = 0.0f;
  }
  // out_i = Σ_j p_ij · v_j / Σ_j p_ij, four queries and up to 4 vectors of hd per pass.
  for (int64_t i0 = 0; i0 < nq; i0 += 4) {
    const int64_t qn = std::min<int64_t>(4, nq - i0), jmax = len0 + i0 + qn - 1;
    for (int64_t c0 = 0; c0 < hd; c0 += 4 * N) {
      const int64_t nv = std::min<int64_t>(4, (hd - c0) / N);
      V acc[4][4];
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t u = 0; u < 4; ++u) acc[i][u] = hn::Zero(df);
      for (int64_t j = 0; j < jmax; ++j) {
        const float* vj = v + j * ld + c0;
        V vv[4] = {hn::Zero(df), hn::Zero(df), hn::Zero(df), hn::Zero(df)};
#pragma GCC unroll 4
        for (int64_t u = 0; u < 4; ++u)
          if (u < nv) vv[u] = hn::LoadU(df, vj + u * N);
#pragma GCC unroll 4
        for (int64_t i = 0; i < 4; ++i) {
          if (i >= qn) break;
          const V p = hn::Set(df, scores[(i0 + i) * lrow + j]);
#pragma GCC unroll 4
          for (int64_t u = 0; u < 4; ++u)
            if (u < nv) acc[i][u] = hn::MulAdd(p, vv[u], acc[i][u]);
        }
      }
      for (int64_t i = 0; i < qn; ++i)
        for (int64_t u = 0; u < nv; ++u)
          hn::StoreU(hn::Mul(acc[i][u], hn::Set(df, inv[i0 + i])), df,
                     out + (i0 + i) * old + c0 + u * N);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq {

HWY_EXPORT(DotImpl);
HWY_EXPORT(AxpyImpl);
HWY_EXPORT(AttendImpl);
HWY_EXPORT(TransposeKeysImpl);
HWY_EXPORT(AttendBlockImpl);

float dot_f32(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotImpl)(a, b, n);
}
void axpy_f32(float a, const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyImpl)(a, x, y, n);
}
void attend_one(const float* q, const float* k, const float* v, int64_t len, int64_t ld, int64_t hd,
                float scale, float* scores, float* out) {
  HWY_DYNAMIC_DISPATCH(AttendImpl)(q, k, v, len, ld, hd, scale, scores, out);
}

void transpose_keys(const float* k, int64_t len, int64_t ld, int64_t hd, int64_t lpad, float* kt) {
  HWY_DYNAMIC_DISPATCH(TransposeKeysImpl)(k, len, ld, hd, lpad, kt);
}
void attend_block(const float* q, int64_t nq, int64_t qld, const float* k, const float* kt,
                  int64_t lpad, const float* v, int64_t ld, int64_t hd, int64_t len0, float scale,
                  float* scores, float* out, int64_t old) {
  HWY_DYNAMIC_DISPATCH(AttendBlockImpl)
  (q, nq, qld, k, kt, lpad, v, ld, hd, len0, scale, scores, out, old);
}

}  // namespace tq
#endif  // HWY_ONCE
