#include "kernels/vec_ops.h"

#include <cmath>
#include <limits>

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/vec_ops.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

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

void AttendImpl(const float* q, const float* k, const float* v, int64_t len, int64_t ld, int64_t hd,
                float scale, float* scores, float* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < len; ++j) {
    scores[j] = scale * DotImpl(q, k + j * ld, hd);
    m = scores[j] > m ? scores[j] : m;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < len; ++j) {
    scores[j] = std::exp(scores[j] - m);
    sum += scores[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < hd; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < len; ++j) AxpyImpl(scores[j] * inv, v + j * ld, out, hd);
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
