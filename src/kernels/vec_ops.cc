#include "kernels/vec_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/dtype.h"

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

// Σ x[i], the read of a streaming-bandwidth measure, as the decode kernels read a model: four
// distant parts of x at once (a core keeps more misses in flight over several streams), each
// load requesting the bytes 2 KB further on. Then the tail.
float StreamSumImpl(const float* x, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kAhead = 2048 / sizeof(float), kParts = 4;
  const int64_t len = n / kParts / (2 * N) * (2 * N);  // each part's length
  auto s0 = hn::Zero(df), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i < len; i += 2 * N) {
    for (int64_t p = 0; p < kParts; ++p) {
      const float* xp = x + p * len + i;
#if HWY_ARCH_X86
      if (p * len + i + kAhead + 2 * N <= n)  // requests stay inside the buffer
        for (int64_t k = 0; k < 2 * N; k += 64 / static_cast<int64_t>(sizeof(float)))
          asm volatile("prefetcht0 %0" : : "m"(xp[kAhead + k]));
#endif
      if (p % 2 == 0) {
        s0 = hn::Add(s0, hn::LoadU(df, xp));
        s1 = hn::Add(s1, hn::LoadU(df, xp + N));
      } else {
        s2 = hn::Add(s2, hn::LoadU(df, xp));
        s3 = hn::Add(s3, hn::LoadU(df, xp + N));
      }
    }
  }
  int64_t i = kParts * len;
  for (; i + N <= n; i += N) s0 = hn::Add(s0, hn::LoadU(df, x + i));
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) s += x[i];
  return s;
}

// At most 16 lanes: a vector of key scores stays inside one 16-position block of the cache.
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

// F16C instructions from AVX2 on; Highway's emulation for older targets mis-rounds overflow
// (9e17 became a finite half on SSE4), so those convert in scalar code.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
constexpr bool kF16Vectors = true;
#else
constexpr bool kF16Vectors = false;
#endif

// Where key position j starts in a KV head's blocks of 16 positions (element d of it at +16 d).
inline int64_t KeyOffset(int64_t hd, int64_t j) { return (j >> 4) * hd * 16 + (j & 15); }

// N cache elements from p, as f32.
HWY_INLINE VF LoadKv(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadKv(DF df, const uint16_t* p) {
  if constexpr (!kF16Vectors) {
    HWY_ALIGN float f[hn::MaxLanes(df)];
    for (size_t i = 0; i < hn::Lanes(df); ++i) f[i] = f16_to_f32(p[i]);
    return hn::Load(df, f);
  }
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

// Caches longer than the last-level cache stream from memory: requests ahead of the loads.
HWY_INLINE void PrefetchKv(const void* p) {
#if HWY_ARCH_X86
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

inline float ScalarKv(const float* p) { return *p; }
inline float ScalarKv(const uint16_t* p) { return f16_to_f32(*p); }

void F32ToF16Impl(const float* x, int64_t n, uint16_t* out) {
  if constexpr (!kF16Vectors) {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
    return;
  }
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, x + i)), dh,
               reinterpret_cast<hwy::float16_t*>(out + i));
  for (; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

void F16ToF32Impl(const uint16_t* x, int64_t n, float* out) {
  if constexpr (!kF16Vectors) {
    for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(x[i]);
    return;
  }
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadKv(df, x + i), df, out + i);
  for (; i < n; ++i) out[i] = f16_to_f32(x[i]);
}

void SiluMulImpl(float* gate, const float* up, int64_t n) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f), cap = hn::Set(df, 88.0f);  // exp(88) is still finite
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(df, gate + i);
    const auto e = hn::Exp(df, hn::Min(hn::Neg(g), cap));
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(df, up + i)), df, gate + i);
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// kernels/ops.h rms_norm in vectors: the sum of squares in f32 over four accumulators (the
// reference sums in double; over a few thousand values the two differ by ~1e-7 relative).
void RmsNormImpl(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    auto s0 = hn::Zero(df), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 4 * N <= d; i += 4 * N) {
      const auto a = hn::LoadU(df, xr + i), b = hn::LoadU(df, xr + i + N);
      const auto c = hn::LoadU(df, xr + i + 2 * N), e = hn::LoadU(df, xr + i + 3 * N);
      s0 = hn::MulAdd(a, a, s0), s1 = hn::MulAdd(b, b, s1);
      s2 = hn::MulAdd(c, c, s2), s3 = hn::MulAdd(e, e, s3);
    }
    for (; i + N <= d; i += N) {
      const auto a = hn::LoadU(df, xr + i);
      s0 = hn::MulAdd(a, a, s0);
    }
    float ss = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
    for (; i < d; ++i) ss += xr[i] * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ss) / d + eps));
    const auto iv = hn::Set(df, inv);
    i = 0;
    for (; i + N <= d; i += N)
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, xr + i), iv), hn::LoadU(df, w + i)), df, o + i);
    for (; i < d; ++i) o[i] = xr[i] * inv * w[i];
  }
}

// row[j] = exp(row[j] - m) for j < len, in vectors (Highway's Exp); returns their sum. Terms
// below e^-87 become 0 instead of subnormals: a product with a subnormal takes a microcode assist,
// and they weigh less than 2^-125 of the maximum's term.
float ExpSum(float* row, int64_t len, float m) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto mv = hn::Set(df, m), floor = hn::Set(df, -87.0f);
  auto sv = hn::Zero(df);
  int64_t j = 0;
  for (; j + N <= len; j += N) {
    const auto a = hn::Sub(hn::LoadU(df, row + j), mv);
    const auto e = hn::IfThenZeroElse(hn::Lt(a, floor), hn::Exp(df, a));
    hn::StoreU(e, df, row + j);
    sv = hn::Add(sv, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, sv));
  for (; j < len; ++j) {
    const float a = row[j] - m;
    row[j] = a < -87.0f ? 0.0f : std::exp(a);
    sum += row[j];
  }
  return sum;
}

float RowMax(const float* row, int64_t len) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto mv = hn::Set(df, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + N <= len; j += N) mv = hn::Max(mv, hn::LoadU(df, row + j));
  float m = hn::GetLane(hn::MaxOfLanes(df, mv));
  for (; j < len; ++j) m = row[j] > m ? row[j] : m;
  return m;
}

// The shapes below are template parameters so that the accumulators stay in registers (with
// run-time bounds GCC kept them on the stack).

// out_i = norm_i · Σ_{j < jn} p[i * pld + j] · v_j over NV vectors of the rows, NH rows of
// weights: each V row is loaded once for all of them.
template <int NH, int NV, typename T>
void WeightedRowsN(const float* p, int64_t pld, const T* v, int64_t vld, int64_t jn,
                   const float* norm, float* out, int64_t old) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF acc[NH][NV];
#pragma GCC unroll 4
  for (int i = 0; i < NH; ++i)
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) acc[i][u] = hn::Zero(df);
  for (int64_t j = 0; j < jn; ++j) {
    VF vv[NV];
    const T* ahead = v + (j + 32) * vld;
    for (int64_t b = 0; b < NV * N * static_cast<int64_t>(sizeof(T)); b += 64)
      PrefetchKv(reinterpret_cast<const char*>(ahead) + b);
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) vv[u] = LoadKv(df, v + j * vld + u * N);
#pragma GCC unroll 4
    for (int i = 0; i < NH; ++i) {
      const VF w = hn::Set(df, p[i * pld + j]);
#pragma GCC unroll 4
      for (int u = 0; u < NV; ++u) acc[i][u] = hn::MulAdd(w, vv[u], acc[i][u]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < NH; ++i) {
    const VF f = hn::Set(df, norm != nullptr ? norm[i] : 1.0f);
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) hn::StoreU(hn::Mul(acc[i][u], f), df, out + i * old + u * N);
  }
}

template <typename T>
using WeightedRowsFn = void (*)(const float*, int64_t, const T*, int64_t, int64_t, const float*,
                                float*, int64_t);

template <typename T, int NH>
WeightedRowsFn<T> WeightedRowsFor(int64_t nv) {
  switch (nv) {
    case 1:
      return &WeightedRowsN<NH, 1, T>;
    case 2:
      return &WeightedRowsN<NH, 2, T>;
    case 3:
      return &WeightedRowsN<NH, 3, T>;
    default:
      return &WeightedRowsN<NH, 4, T>;
  }
}

// As WeightedRowsN for nh <= 4 rows over all hd (chunks of up to 4 vectors).
template <typename T>
void WeightedRows(const float* p, int64_t pld, int64_t nh, const T* v, int64_t vld, int64_t jn,
                  int64_t hd, const float* norm, float* out, int64_t old) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  if (hd % N != 0) {  // head sizes that are not a multiple of the vector width
    for (int64_t i = 0; i < nh; ++i)
      for (int64_t d = 0; d < hd; ++d) {
        float s = 0.0f;
        for (int64_t j = 0; j < jn; ++j) s += p[i * pld + j] * ScalarKv(v + j * vld + d);
        out[i * old + d] = s * (norm != nullptr ? norm[i] : 1.0f);
      }
    return;
  }
  for (int64_t c0 = 0; c0 < hd; c0 += 4 * N) {
    const int64_t nv = std::min<int64_t>(4, (hd - c0) / N);
    WeightedRowsFn<T> fn = nh == 1   ? WeightedRowsFor<T, 1>(nv)
                           : nh == 2 ? WeightedRowsFor<T, 2>(nv)
                           : nh == 3 ? WeightedRowsFor<T, 3>(nv)
                                     : WeightedRowsFor<T, 4>(nv);
    fn(p, pld, v + c0, vld, jn, norm, out + c0, old);
  }
}

// Scores of NH heads over TILES (1 or 2) vectors of positions from j of a KV head's key blocks:
// scores[i * lrow + u * N] = scale · q_i · k_{j + u N ..}.
template <int NH, int TILES, typename T>
void ScoreTiles(const float* q, int64_t qld, int64_t hd, const T* kt, int64_t j, float scale,
                float* scores, int64_t lrow) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF a[NH][TILES];
#pragma GCC unroll 4
  for (int i = 0; i < NH; ++i)
#pragma GCC unroll 4
    for (int u = 0; u < TILES; ++u) a[i][u] = hn::Zero(df);
  const T* kp[TILES];
#pragma GCC unroll 4
  for (int u = 0; u < TILES; ++u) kp[u] = kt + KeyOffset(hd, j + u * N);
  constexpr int64_t kAhead = 8192 / sizeof(T);  // elements 8 KB ahead: 4 f16 key blocks of 64
  for (int64_t d = 0; d < hd; ++d) {
    VF k[TILES];
    if ((d * 16 * static_cast<int64_t>(sizeof(T))) % 64 == 0)
#pragma GCC unroll 4
      for (int u = 0; u < TILES; ++u) PrefetchKv(kp[u] + d * 16 + kAhead);
#pragma GCC unroll 4
    for (int u = 0; u < TILES; ++u) k[u] = LoadKv(df, kp[u] + d * 16);
#pragma GCC unroll 4
    for (int i = 0; i < NH; ++i) {
      const VF qv = hn::Set(df, q[i * qld + d]);
#pragma GCC unroll 4
      for (int u = 0; u < TILES; ++u) a[i][u] = hn::MulAdd(qv, k[u], a[i][u]);
    }
  }
  const VF sv = hn::Set(df, scale);
#pragma GCC unroll 4
  for (int i = 0; i < NH; ++i)
#pragma GCC unroll 4
    for (int u = 0; u < TILES; ++u) hn::StoreU(hn::Mul(a[i][u], sv), df, scores + i * lrow + u * N);
}

// Scores of nh <= 4 heads (q rows strided by qld) over positions [j0, j0 + len), j0 a multiple
// of 16: scores[i * lrow + j] for j < len rounded up to whole vectors.
template <typename T>
void GroupScores(const float* q, int64_t qld, int64_t nh, int64_t hd, const T* kt, int64_t j0,
                 int64_t len, float scale, float* scores, int64_t lrow) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t tiles = (len + N - 1) / N;
  using Fn = void (*)(const float*, int64_t, int64_t, const T*, int64_t, float, float*, int64_t);
  static constexpr Fn kTwo[4] = {&ScoreTiles<1, 2, T>, &ScoreTiles<2, 2, T>, &ScoreTiles<3, 2, T>,
                                 &ScoreTiles<4, 2, T>};
  static constexpr Fn kOne[4] = {&ScoreTiles<1, 1, T>, &ScoreTiles<2, 1, T>, &ScoreTiles<3, 1, T>,
                                 &ScoreTiles<4, 1, T>};
  int64_t t = 0;
  for (; t + 2 <= tiles; t += 2)
    kTwo[nh - 1](q, qld, hd, kt, j0 + t * N, scale, scores + t * N, lrow);
  if (t < tiles) kOne[nh - 1](q, qld, hd, kt, j0 + t * N, scale, scores + t * N, lrow);
}

template <typename T>
void AttendPartialT(const float* q, int64_t g, int64_t hd, const T* kt, const T* v, int64_t vld,
                    int64_t j0, int64_t j1, float scale, float* scores, float* m, float* l,
                    float* acc) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t len = j1 - j0, lrow = (len + N - 1) / N * N;
  for (int64_t i0 = 0; i0 < g; i0 += 4) {
    const int64_t nh = std::min<int64_t>(4, g - i0);
    GroupScores(q + i0 * hd, hd, nh, hd, kt, j0, len, scale, scores + i0 * lrow, lrow);
    for (int64_t i = i0; i < i0 + nh; ++i) {
      m[i] = RowMax(scores + i * lrow, len);
      l[i] = ExpSum(scores + i * lrow, len, m[i]);
    }
    WeightedRows(scores + i0 * lrow, lrow, nh, v + j0 * vld, vld, len, hd, nullptr, acc + i0 * hd,
                 hd);
  }
}

void AttendPartialF32(const float* q, int64_t g, int64_t hd, const float* kt, const float* v,
                      int64_t vld, int64_t j0, int64_t j1, float scale, float* scores, float* m,
                      float* l, float* acc) {
  AttendPartialT(q, g, hd, kt, v, vld, j0, j1, scale, scores, m, l, acc);
}
void AttendPartialF16(const float* q, int64_t g, int64_t hd, const uint16_t* kt, const uint16_t* v,
                      int64_t vld, int64_t j0, int64_t j1, float scale, float* scores, float* m,
                      float* l, float* acc) {
  AttendPartialT(q, g, hd, kt, v, vld, j0, j1, scale, scores, m, l, acc);
}

// Up to 4 query rows at once: scores of N positions per vector from the transposed keys (rows
// past their own length are computed and then zeroed), exp in vectors, then V rows streamed once
// for all of them. Each row's arithmetic is the same whichever rows share its pass.
template <typename T>
void AttendRowsT(const float* q, int64_t nr, int64_t qld, const int64_t* len, const T* kt,
                 const T* v, int64_t vld, int64_t hd, float scale, float* scores, float* out,
                 int64_t old) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t i0 = 0; i0 < nr; i0 += 4) {
    const int64_t qn = std::min<int64_t>(4, nr - i0);
    const int64_t lmax = *std::max_element(len + i0, len + i0 + qn);
    const int64_t lrow = (lmax + N - 1) / N * N;
    GroupScores(q + i0 * qld, qld, qn, hd, kt, 0, lmax, scale, scores, lrow);
    float inv[4];
    for (int64_t i = 0; i < qn; ++i) {
      float* row = scores + i * lrow;
      const int64_t n = len[i0 + i];
      inv[i] = 1.0f / ExpSum(row, n, RowMax(row, n));
      for (int64_t j = n; j < lrow; ++j) row[j] = 0.0f;
    }
    WeightedRows(scores, lrow, qn, v, vld, lmax, hd, inv, out + i0 * old, old);
  }
}

void AttendRowsF32(const float* q, int64_t nr, int64_t qld, const int64_t* len, const float* kt,
                   const float* v, int64_t vld, int64_t hd, float scale, float* scores, float* out,
                   int64_t old) {
  AttendRowsT(q, nr, qld, len, kt, v, vld, hd, scale, scores, out, old);
}
void AttendRowsF16(const float* q, int64_t nr, int64_t qld, const int64_t* len, const uint16_t* kt,
                   const uint16_t* v, int64_t vld, int64_t hd, float scale, float* scores,
                   float* out, int64_t old) {
  AttendRowsT(q, nr, qld, len, kt, v, vld, hd, scale, scores, out, old);
}

}  // namespace HWY_NAMESPACE
}  // namespace tq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq {

HWY_EXPORT(StreamSumImpl);
HWY_EXPORT(RowMax);
HWY_EXPORT(ExpSum);
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(F32ToF16Impl);
HWY_EXPORT(F16ToF32Impl);
HWY_EXPORT(AttendPartialF32);
HWY_EXPORT(AttendPartialF16);
HWY_EXPORT(AttendRowsF32);
HWY_EXPORT(AttendRowsF16);

void rms_norm_simd(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, w, rows, d, eps, out);
}

float stream_sum_f32(const float* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(StreamSumImpl)(x, n);
}
float max_simd(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMax)(x, n); }
float exp_sub_sum_simd(float* x, int64_t n, float m) {
  return HWY_DYNAMIC_DISPATCH(ExpSum)(x, n, m);
}
void softmax_simd(float* x, int64_t n) {
  const float inv = 1.0f / exp_sub_sum_simd(x, n, max_simd(x, n));
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}
void silu_mul_simd(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SiluMulImpl)(gate, up, n);
}
void f32_to_f16_n(const float* x, int64_t n, uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(F32ToF16Impl)(x, n, out);
}
void f16_to_f32_n(const uint16_t* x, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(F16ToF32Impl)(x, n, out);
}

void attend_partial(const float* q, int64_t g, int64_t hd, const float* kt, const float* v,
                    int64_t vld, int64_t j0, int64_t j1, float scale, float* scores, float* m,
                    float* l, float* acc) {
  HWY_DYNAMIC_DISPATCH(AttendPartialF32)(q, g, hd, kt, v, vld, j0, j1, scale, scores, m, l, acc);
}
void attend_partial(const float* q, int64_t g, int64_t hd, const uint16_t* kt, const uint16_t* v,
                    int64_t vld, int64_t j0, int64_t j1, float scale, float* scores, float* m,
                    float* l, float* acc) {
  HWY_DYNAMIC_DISPATCH(AttendPartialF16)(q, g, hd, kt, v, vld, j0, j1, scale, scores, m, l, acc);
}

void attend_rows(const float* q, int64_t nr, int64_t qld, const int64_t* len, const float* kt,
                 const float* v, int64_t vld, int64_t hd, float scale, float* scores, float* out,
                 int64_t old) {
  HWY_DYNAMIC_DISPATCH(AttendRowsF32)(q, nr, qld, len, kt, v, vld, hd, scale, scores, out, old);
}
void attend_rows(const float* q, int64_t nr, int64_t qld, const int64_t* len, const uint16_t* kt,
                 const uint16_t* v, int64_t vld, int64_t hd, float scale, float* scores, float* out,
                 int64_t old) {
  HWY_DYNAMIC_DISPATCH(AttendRowsF16)(q, nr, qld, len, kt, v, vld, hd, scale, scores, out, old);
}

}  // namespace tq
#endif  // HWY_ONCE
