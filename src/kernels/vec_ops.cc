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
  const auto mv = hn::Set(df, m);
  auto sv = hn::Zero(df);
  int64_t j = 0;
  for (; j + N <= len; j += N) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, scores + j), mv));
    hn::StoreU(e, df, scores + j);
    sv = hn::Add(sv, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, sv));
  for (; j < len; ++j) scores[j] = std::exp(scores[j] - m), sum += scores[j];
  const float inv = 1.0f / sum;
  if (hd % N != 0) {  // head sizes that are not a multiple of the vector width
    for (int64_t i = 0; i < hd; ++i) out[i] = 0.0f;
    for (j = 0; j < len; ++j) AxpyImpl(scores[j] * inv, v + j * ld, out, hd);
    return;
  }
  constexpr int64_t kOut = 8;
  for (int64_t i0 = 0; i0 < hd; i0 += kOut * N) {
    const int64_t nv = std::min<int64_t>(kOut, (hd - i0) / N);
    hn::Vec<decltype(df)> acc[kOut];
    for (int64_t u = 0; u < kOut; ++u) acc[u] = hn::Zero(df);
    for (j = 0; j < len; ++j) {
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

}  // namespace HWY_NAMESPACE
}  // namespace tq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq {

HWY_EXPORT(DotImpl);
HWY_EXPORT(AxpyImpl);
HWY_EXPORT(AttendImpl);

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

}  // namespace tq
#endif  // HWY_ONCE
