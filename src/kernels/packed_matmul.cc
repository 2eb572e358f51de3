// SIMD kernels of packed_matmul with f32 activations, compiled once per ISA by Highway's
// foreach_target and picked at run time. Scalar references: kernels/packed_ref.cc.
#include <algorithm>
#include <cstring>
#include <vector>

#include "formats/mlx_quant.h"
#include "kernels/packed_matmul.h"
#include "kernels/strip_plan.h"

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // also compile the AVX-512 VNNI/VBMI (Ice Lake and later) target
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/packed_matmul.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

inline float SumLanes(DF df, VF v) { return hn::GetLane(hn::SumOfLanes(df, v)); }

// N weights k.. of a float-format row, widened to f32.
template <WeightFormat F>
HWY_INLINE VF LoadW(DF df, const uint8_t* row, int64_t k) {
  if constexpr (F == WeightFormat::kF32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(row) + k));
  } else {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + k));
  }
}

template <WeightFormat F>
inline float ScalarW(const uint8_t* row, int64_t k) {
  if constexpr (F == WeightFormat::kF32) return scale_at(DType::kF32, row, k);
  if constexpr (F == WeightFormat::kBF16) return scale_at(DType::kBF16, row, k);
  return scale_at(DType::kF16, row, k);
}

// Decode (n = 1) for float formats: four rows per pass share every load of x.
template <WeightFormat F>
void GemvFloat(const PackedMatrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t cols = w.cols, main = cols - cols % N, rb = w.row_bytes();
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint8_t* p0 = w.data + r * rb;
    const uint8_t *p1 = p0 + rb, *p2 = p1 + rb, *p3 = p2 + rb;
    VF a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t k = 0; k < main; k += N) {
      const VF xv = hn::LoadU(df, x + k);
      a0 = hn::MulAdd(LoadW<F>(df, p0, k), xv, a0);
      a1 = hn::MulAdd(LoadW<F>(df, p1, k), xv, a1);
      a2 = hn::MulAdd(LoadW<F>(df, p2, k), xv, a2);
      a3 = hn::MulAdd(LoadW<F>(df, p3, k), xv, a3);
    }
    float s0 = SumLanes(df, a0), s1 = SumLanes(df, a1), s2 = SumLanes(df, a2),
          s3 = SumLanes(df, a3);
    for (int64_t k = main; k < cols; ++k) {
      s0 += ScalarW<F>(p0, k) * x[k], s1 += ScalarW<F>(p1, k) * x[k];
      s2 += ScalarW<F>(p2, k) * x[k], s3 += ScalarW<F>(p3, k) * x[k];
    }
    y[r] = s0, y[r + 1] = s1, y[r + 2] = s2, y[r + 3] = s3;
  }
  for (; r < r1; ++r) {
    const uint8_t* p = w.data + r * rb;
    VF a = hn::Zero(df), b = a;
    int64_t k = 0;
    for (; k + 2 * N <= main; k += 2 * N) {
      a = hn::MulAdd(LoadW<F>(df, p, k), hn::LoadU(df, x + k), a);
      b = hn::MulAdd(LoadW<F>(df, p, k + N), hn::LoadU(df, x + k + N), b);
    }
    for (; k < main; k += N) a = hn::MulAdd(LoadW<F>(df, p, k), hn::LoadU(df, x + k), a);
    float s = SumLanes(df, hn::Add(a, b));
    for (k = main; k < cols; ++k) s += ScalarW<F>(p, k) * x[k];
    y[r] = s;
  }
}

// Σx per group, shared by every row: the bias term of s·Σqx + b·Σx.
void GroupSums(const float* x, int64_t cols, int64_t group, float* out) {
  for (int64_t g = 0; g < cols / group; ++g) {
    float s = 0.0f;
    for (int64_t k = 0; k < group; ++k) s += x[g * group + k];
    out[g] = s;
  }
}

// Decode, affine 4-bit: byte j of a chunk of 2N codes holds code 2j (low nibble) and 2j+1
// (high nibble), so x is split per chunk into its even and odd halves once per call.
void GemvAffine4(const PackedMatrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t cols = w.cols, G = w.groups(), chunks = w.group / (2 * N);
  thread_local std::vector<float> xs, gsum;
  xs.resize(static_cast<size_t>(cols));
  gsum.resize(static_cast<size_t>(G));
  for (int64_t c = 0; c < cols; c += 2 * N)
    for (int64_t j = 0; j < N; ++j) xs[c + j] = x[c + 2 * j], xs[c + N + j] = x[c + 2 * j + 1];
  GroupSums(x, cols, w.group, gsum.data());
  const auto mask = hn::Set(du8, 0xF);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes();
    VF tot = hn::Zero(df);
    float bsum = 0.0f;
    for (int64_t g = 0; g < G; ++g) {
      VF ga = hn::Zero(df), gb = ga;
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t k = (g * chunks + c) * 2 * N;
        const auto b = hn::LoadU(du8, row + k / 2);
        const VF wl = hn::ConvertTo(df, hn::PromoteTo(di32, hn::And(b, mask)));
        const VF wh = hn::ConvertTo(df, hn::PromoteTo(di32, hn::ShiftRight<4>(b)));
        ga = hn::MulAdd(wl, hn::LoadU(df, xs.data() + k), ga);
        gb = hn::MulAdd(wh, hn::LoadU(df, xs.data() + k + N), gb);
      }
      const int64_t gi = r * G + g;
      tot = hn::MulAdd(hn::Set(df, scale_at(w.scale_dtype, w.scales, gi)), hn::Add(ga, gb), tot);
      bsum += scale_at(w.scale_dtype, w.biases, gi) * gsum[g];
    }
    y[r] = SumLanes(df, tot) + bsum;
  }
}

// Decode, affine 8-bit: one code per byte.
void GemvAffine8(const PackedMatrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const DF df;
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t G = w.groups(), group = w.group;
  thread_local std::vector<float> gsum;
  gsum.resize(static_cast<size_t>(G));
  GroupSums(x, w.cols, group, gsum.data());
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes();
    VF tot = hn::Zero(df);
    float bsum = 0.0f;
    for (int64_t g = 0; g < G; ++g) {
      VF ga = hn::Zero(df), gb = ga;
      const int64_t k0 = g * group;
      int64_t k = k0;
      for (; k + 2 * N <= k0 + group; k += 2 * N) {
        ga = hn::MulAdd(hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(du8, row + k))),
                        hn::LoadU(df, x + k), ga);
        gb = hn::MulAdd(hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(du8, row + k + N))),
                        hn::LoadU(df, x + k + N), gb);
      }
      for (; k < k0 + group; k += N)
        ga = hn::MulAdd(hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(du8, row + k))),
                        hn::LoadU(df, x + k), ga);
      const int64_t gi = r * G + g;
      tot = hn::MulAdd(hn::Set(df, scale_at(w.scale_dtype, w.scales, gi)), hn::Add(ga, gb), tot);
      bsum += scale_at(w.scale_dtype, w.biases, gi) * gsum[g];
    }
    y[r] = SumLanes(df, tot) + bsum;
  }
}

// E4M3 codes as f32 / 256: sign-extended to 16 bits and shifted 7 places, a code's sign lands on
// bit 15 (a copy on bit 14), its exponent and mantissa on bits 13..7; cleared of the copy, that
// is the f16 of the value times 2^-8, subnormals included. Codes 0x7F and 0xFF (NaN to
// e4m3_to_f32) read as +-480: a quantizer never writes them.
constexpr int16_t kE4m3Mask = static_cast<int16_t>(0xBFFF);

// N codes at p (DecodeRow, and targets whose vectors have no halves).
HWY_INLINE VF E4m3Over256(DF df, const uint8_t* p) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int16_t, DF> d16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto v =
      hn::ShiftLeft<7>(hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p))));
  return hn::PromoteTo(df, hn::BitCast(dh, hn::And(v, hn::Set(d16, kE4m3Mask))));
}

// 2N codes at p: one widening for both halves (32 codes per 512-bit vector).
HWY_INLINE void E4m3PairOver256(DF df, const uint8_t* p, VF& lo, VF& hi) {
#if HWY_TARGET == HWY_SCALAR
  lo = E4m3Over256(df, p), hi = E4m3Over256(df, p + 1);
#else
  const hn::Repartition<int16_t, DF> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Half<decltype(d16)> dhalf;
  const hn::Rebind<hwy::float16_t, DF> dh;
  auto v = hn::ShiftLeft<7>(hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p))));
  v = hn::And(v, hn::Set(d16, kE4m3Mask));
  lo = hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(dhalf, v)));
  hi = hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(dhalf, v)));
#endif
}

// n E8M0 scales as f32 times 256 (the codes above are value / 256): e8m0_to_f32's bits.
void Mxfp8Scales(const uint8_t* s, int64_t n, float* out) {
  const DF df;
  const hn::Rebind<uint32_t, DF> d32;
  const hn::Rebind<uint8_t, DF> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto b = hn::PromoteTo(d32, hn::LoadU(d8, s + i));
    const auto bits =
        hn::IfThenElse(hn::Eq(b, hn::Zero(d32)), hn::Set(d32, 0x00400000u), hn::ShiftLeft<23>(b));
    hn::StoreU(hn::Mul(hn::BitCast(df, bits), hn::Set(df, 256.0f)), df, out + i);
  }
  for (; i < n; ++i) {  // inline: a call per scale cost small rows more than their codes
    const uint32_t b = s[i], bits = b == 0 ? 0x00400000u : b << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    out[i] = 256.0f * f;
  }
}

inline void PrefetchLine(const uint8_t* p) {
#if HWY_ARCH_X86
  asm volatile("prefetcht0 %0" : : "m"(*p));  // GCC 12 drops _mm_prefetch in some loops
#else
  __builtin_prefetch(p);
#endif
}

// R rows of an mxfp8 matrix (codes at rp[i], scales times 256 at sp[i]) against x: every load of
// x serves R rows; a group's 32 products sum in one vector, which its scale then weighs. kPf:
// each 64 codes of a row request the line pf bytes further on.
template <int R, bool kPf>
HWY_INLINE void Mxfp8Rows(const uint8_t* const* rp, const float* const* sp, const float* x,
                          int64_t G, int64_t pf, float* out) {
  const DF df;
  constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(DF()));
  constexpr int64_t kSteps = 32 / (2 * N);  // 2N codes a step, 32 a group
  VF acc[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) acc[i] = hn::Zero(df);
  auto group = [&](int64_t g) {
    const int64_t k0 = 32 * g;
    VF xv[2 * kSteps];
#pragma GCC unroll 16
    for (int64_t j = 0; j < 2 * kSteps; ++j) xv[j] = hn::LoadU(df, x + k0 + j * N);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      VF lo, hi;
      E4m3PairOver256(df, rp[i] + k0, lo, hi);
      VF p = hn::MulAdd(hi, xv[1], hn::Mul(lo, xv[0]));
#pragma GCC unroll 16
      for (int64_t j = 1; j < kSteps; ++j) {
        E4m3PairOver256(df, rp[i] + k0 + 2 * N * j, lo, hi);
        p = hn::MulAdd(hi, xv[2 * j + 1], hn::MulAdd(lo, xv[2 * j], p));
      }
      acc[i] = hn::MulAdd(p, hn::Set(df, sp[i][g]), acc[i]);
    }
  };
  int64_t g = 0;
  for (; g + 2 <= G; g += 2) {
    if constexpr (kPf) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) PrefetchLine(rp[i] + 32 * g + pf);
    }
    group(g);
    group(g + 1);
  }
  if (g < G) group(g);
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) out[i] = SumLanes(df, acc[i]);
}

// Decode, mxfp8 (groups of 32): strips of 8 rows in StripPlan's order with parts (8 distant
// streams on 2048-column rows: 1B decode 21-24 tok/s against 20-21 adjacent), each strip's
// scales converted once.
void GemvMxfp8(const PackedMatrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t G = w.groups(), rb = w.row_bytes();
  const StripPlan plan(w, r0, r1, true);
  const int64_t pf = strip_prefetch_distance(w, plan);
  thread_local std::vector<float> sc;
  sc.resize(static_cast<size_t>(8 * G));
  for (int64_t k = 0; k < plan.strips; ++k) {
    int64_t seg0[8], seg_n[8];
    const int nseg = plan.segments(k, seg0, seg_n);
    const uint8_t* rp[8];
    const float* sp[8];
    int64_t idx[8];
    int m = 0;
    for (int s = 0; s < nseg; ++s) {
      Mxfp8Scales(w.scales + seg0[s] * G, seg_n[s] * G, sc.data() + m * G);
      for (int64_t i = 0; i < seg_n[s]; ++i, ++m) {
        idx[m] = seg0[s] + i;
        rp[m] = w.data + idx[m] * rb;
        sp[m] = sc.data() + m * G;
      }
    }
    float out[8];
    int j = 0;
    if (m == 8) Mxfp8Rows<8, true>(rp, sp, x, G, pf, out), j = 8;
    for (; j + 4 <= m; j += 4) Mxfp8Rows<4, true>(rp + j, sp + j, x, G, pf, out + j);
    for (; j < m; ++j) Mxfp8Rows<1, true>(rp + j, sp + j, x, G, pf, out + j);
    for (int i = 0; i < m; ++i) y[idx[i]] = out[i];
  }
}

constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Row r as f32 into out[cols]; the weights as packed_weight computes them.
void DecodeRow(const PackedMatrix& w, int64_t r, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const uint8_t* row = w.data + r * w.row_bytes();
  const int64_t cols = w.cols, main = cols - cols % N;
  switch (w.format) {
    case WeightFormat::kF32:
      std::memcpy(out, row, static_cast<size_t>(cols) * 4);
      return;
    case WeightFormat::kBF16:
      for (int64_t k = 0; k < main; k += N)
        hn::StoreU(LoadW<WeightFormat::kBF16>(df, row, k), df, out + k);
      for (int64_t k = main; k < cols; ++k) out[k] = ScalarW<WeightFormat::kBF16>(row, k);
      return;
    case WeightFormat::kF16:
      for (int64_t k = 0; k < main; k += N)
        hn::StoreU(LoadW<WeightFormat::kF16>(df, row, k), df, out + k);
      for (int64_t k = main; k < cols; ++k) out[k] = ScalarW<WeightFormat::kF16>(row, k);
      return;
    default:
      break;
  }
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  const int64_t G = w.groups(), g = w.group;
  uint8_t codes[128];
  for (int64_t j = 0; j < G; ++j) {
    unpack_codes(row, j * g, g, w.bits, codes);
    float* o = out + j * g;
    const int64_t gi = r * G + j;
    if (w.format == WeightFormat::kAffine) {
      const VF s = hn::Set(df, scale_at(w.scale_dtype, w.scales, gi));
      const VF b = hn::Set(df, scale_at(w.scale_dtype, w.biases, gi));
      for (int64_t k = 0; k < g; k += N) {
        const VF q = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(du8, codes + k)));
        hn::StoreU(hn::MulAdd(s, q, b), df, o + k);
      }
    } else if (w.format == WeightFormat::kMxfp8) {
      const VF s = hn::Set(df, 256.0f * e8m0_to_f32(w.scales[gi]));
      for (int64_t k = 0; k < g; k += N)
        hn::StoreU(hn::Mul(s, E4m3Over256(df, codes + k)), df, o + k);
    } else {
      const float s =
          w.format == WeightFormat::kNvfp4 ? e4m3_to_f32(w.scales[gi]) : e8m0_to_f32(w.scales[gi]);
      for (int64_t k = 0; k < g; ++k) o[k] = s * kE2M1[codes[k]];
    }
  }
}

float DotF32(DF df, const float* a, const float* b, int64_t n) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF s0 = hn::Zero(df), s1 = s0;
  int64_t k = 0;
  for (; k + 2 * N <= n; k += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(df, a + k), hn::LoadU(df, b + k), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + k + N), hn::LoadU(df, b + k + N), s1);
  }
  for (; k + N <= n; k += N) s0 = hn::MulAdd(hn::LoadU(df, a + k), hn::LoadU(df, b + k), s0);
  float s = SumLanes(df, hn::Add(s0, s1));
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

// Decode for the formats without a fused kernel: the row to f32, then a dot product.
void GemvDecoded(const PackedMatrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const DF df;
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(w.cols));
  for (int64_t r = r0; r < r1; ++r) {
    DecodeRow(w, r, row.data());
    y[r] = DotF32(df, row.data(), x, w.cols);
  }
}

// RB rows (of a decoded strip, stride cols) times TB tokens (stride cols): RB*TB accumulators.
template <int RB, int TB>
HWY_NOINLINE void Tile(const float* w, const float* x, int64_t cols, float* y, int64_t ldy) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t main = cols - cols % N;
  VF acc[RB][TB];
  for (int i = 0; i < RB; ++i)
    for (int t = 0; t < TB; ++t) acc[i][t] = hn::Zero(df);
  for (int64_t k = 0; k < main; k += N) {
    VF wv[RB];
#pragma GCC unroll 4
    for (int i = 0; i < RB; ++i) wv[i] = hn::LoadU(df, w + i * cols + k);
#pragma GCC unroll 4
    for (int t = 0; t < TB; ++t) {
      const VF xv = hn::LoadU(df, x + t * cols + k);
#pragma GCC unroll 4
      for (int i = 0; i < RB; ++i) acc[i][t] = hn::MulAdd(wv[i], xv, acc[i][t]);
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int t = 0; t < TB; ++t) {
      float s = SumLanes(df, acc[i][t]);
      for (int64_t k = main; k < cols; ++k) s += w[i * cols + k] * x[t * cols + k];
      y[t * ldy + i] = s;
    }
}

template <int RB>
void TileRows(const float* w, const float* x, int64_t cols, int64_t tb, float* y, int64_t ldy) {
  if (tb == 3) return Tile<RB, 3>(w, x, cols, y, ldy);
  if (tb == 2) return Tile<RB, 2>(w, x, cols, y, ldy);
  return Tile<RB, 1>(w, x, cols, y, ldy);
}

// Prefill: strips of 4 rows decoded to f32 once per block of tokens, then 4x3 FMA tiles.
void GemmStrips(const PackedMatrix& w, const float* x, int64_t n, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
  constexpr int64_t kRB = 4, kTB = 3;
  const int64_t cols = w.cols;
  // Tokens per block: their activations stay in L2 while the strips stream past.
  const int64_t block = std::clamp<int64_t>((512 << 10) / std::max<int64_t>(cols * 4, 1), 6, 96);
  thread_local std::vector<float> strip;
  strip.resize(static_cast<size_t>(kRB * cols));
  for (int64_t t0 = 0; t0 < n; t0 += block) {
    const int64_t t1 = std::min(n, t0 + block);
    for (int64_t r = r0; r < r1; r += kRB) {
      const int64_t rb = std::min(kRB, r1 - r);
      for (int64_t i = 0; i < rb; ++i) DecodeRow(w, r + i, strip.data() + i * cols);
      for (int64_t t = t0; t < t1; t += kTB) {
        const int64_t tb = std::min(kTB, t1 - t);
        const float* xt = x + t * cols;
        float* yt = y + t * ldy + r;
        switch (rb) {
          case 4:
            TileRows<4>(strip.data(), xt, cols, tb, yt, ldy);
            break;
          case 3:
            TileRows<3>(strip.data(), xt, cols, tb, yt, ldy);
            break;
          case 2:
            TileRows<2>(strip.data(), xt, cols, tb, yt, ldy);
            break;
          default:
            TileRows<1>(strip.data(), xt, cols, tb, yt, ldy);
        }
      }
    }
  }
}

void GemvRows(const PackedMatrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  switch (w.format) {
    case WeightFormat::kF32:
      return GemvFloat<WeightFormat::kF32>(w, x, y, r0, r1);
    case WeightFormat::kBF16:
      return GemvFloat<WeightFormat::kBF16>(w, x, y, r0, r1);
    case WeightFormat::kF16:
      return GemvFloat<WeightFormat::kF16>(w, x, y, r0, r1);
    case WeightFormat::kAffine:
      if (w.bits == 4) return GemvAffine4(w, x, y, r0, r1);
      if (w.bits == 8) return GemvAffine8(w, x, y, r0, r1);
      return GemvDecoded(w, x, y, r0, r1);
    case WeightFormat::kMxfp8:
      if (w.group == 32) return GemvMxfp8(w, x, y, r0, r1);
      return GemvDecoded(w, x, y, r0, r1);
    default:
      return GemvDecoded(w, x, y, r0, r1);
  }
}

void PackedMatmulImpl(const PackedMatrix& w, const float* x, int64_t n, float* y, int64_t ldy,
                      int64_t r0, int64_t r1, BatchKernel kernel) {
  if (r0 >= r1 || n <= 0) return;
  if (kernel == BatchKernel::kPerToken) {
    for (int64_t t = 0; t < n; ++t) GemvRows(w, x + t * w.cols, y + t * ldy, r0, r1);
    return;
  }
  if (n > 1 || kernel == BatchKernel::kTiles) return GemmStrips(w, x, n, y, ldy, r0, r1);
  GemvRows(w, x, y, r0, r1);
}

void DecodeRowImpl(const PackedMatrix& w, int64_t r, float* out) { DecodeRow(w, r, out); }

const char* IsaName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace tq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq {

HWY_EXPORT(PackedMatmulImpl);
HWY_EXPORT(DecodeRowImpl);
HWY_EXPORT(IsaName);

void packed_matmul(const PackedMatrix& w, const float* x, int64_t n, float* y, int64_t ldy,
                   int64_t r0, int64_t r1, BatchKernel kernel) {
  HWY_DYNAMIC_DISPATCH(PackedMatmulImpl)(w, x, n, y, ldy, r0, r1, kernel);
}

void packed_decode_row(const PackedMatrix& w, int64_t r, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeRowImpl)(w, r, out);
}

const char* packed_kernel_isa() { return HWY_DYNAMIC_DISPATCH(IsaName)(); }

}  // namespace tq
#endif  // HWY_ONCE
