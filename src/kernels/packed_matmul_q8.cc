// Integer dot-product kernels of packed_matmul_q8 (affine and E2M1 weights × int8 activations),
// one per ISA through Highway's foreach_target: AVX-512 VNNI vpdpbusd on AVX3_DL (every affine
// width, mxfp4, nvfp4), AVX2 vpmaddubsw / vpmaddwd on AVX2/AVX3 (all but 8-bit: 8-bit codes
// would saturate vpmaddubsw's i16 sums). The narrow codes: kernels/packed_codes_q8-inl.h.
// Scalar reference: packed_matmul_q8_ref (kernels/packed_ref.cc).
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "formats/mlx_quant.h"
#include "kernels/packed_matmul.h"
#include "kernels/strip_plan.h"

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/packed_matmul_q8.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#if HWY_ARCH_X86
#include <immintrin.h>
#endif
// GCC 12's AVX-512 headers build casts and reductions from _mm512_undefined_*: false alarms.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

HWY_BEFORE_NAMESPACE();
// Highway 1.0.3's AVX3_DL names "avxvnni" (VEX, not in its CPU check) but not the EVEX form its
// check requires. GCC takes it as a pragma; clang 14 (the fuzz build) cannot add it inside
// Highway's attribute push, so there the AVX3_DL target has no int8 kernels (float path).
#if HWY_TARGET == HWY_AVX3_DL && !defined(__clang__)
#pragma GCC target("avx512vnni")
#define TQ_Q8_VNNI_TARGET 1
#endif
namespace tq {
namespace HWY_NAMESPACE {

#if defined(TQ_Q8_VNNI_TARGET) || HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
#define TQ_Q8_KERNELS 1

constexpr bool kVnni = HWY_TARGET == HWY_AVX3_DL;
constexpr bool k512 = HWY_TARGET != HWY_AVX2;

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Σ over 4-byte lanes of u8 codes × s8 activations (codes < 16 when !kVnni).
inline __m256i DotU8S8(__m256i acc, __m256i u, __m256i s) {
  if constexpr (kVnni) {
    // Spelled out as EVEX: Highway 1.0.3's AVX3_DL target string enables AVX-VNNI, so GCC picks
    // the VEX form for ymm operands, which AVX-512-VNNI CPUs without AVX-VNNI (Zen 4) fault on.
    asm("%{evex%} vpdpbusd {%2, %1, %0|%0, %1, %2}" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
  } else {
    const __m256i p = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
}

#if HWY_TARGET != HWY_AVX2
inline __m512i DotU8S8(__m512i acc, __m512i u, __m512i s) {
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(acc, u, s);
  } else {
    const __m512i p = _mm512_maddubs_epi16(u, s);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
  }
}
#endif

namespace hn = hwy::HWY_NAMESPACE;

// n values of a scale array (f32/f16/bf16) from index i0 to f32, in vectors.
inline void ToF32(DType t, const uint8_t* base, int64_t i0, int64_t n, float* out) {
  if (t == DType::kF32) {
    std::memcpy(out, base + 4 * i0, static_cast<size_t>(n) * 4);
    return;
  }
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  if (t == DType::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, decltype(df)> dh;
    const auto* p = reinterpret_cast<const hwy::bfloat16_t*>(base) + i0;
    for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + i)), df, out + i);
  } else {
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const auto* p = reinterpret_cast<const hwy::float16_t*>(base) + i0;
    for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] = scale_at(t, base, i0 + i);
}

// Σ a[i]·b[i], in vectors (the bias terms: one per group of the row). Both arrays must be
// readable up to a whole vector past n (the tail is a masked load).
constexpr int64_t kPad = 16;
inline float DotF(const float* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto acc = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= n; i += N) acc = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc);
  if (i < n) {
    const auto m = hn::FirstN(df, static_cast<size_t>(n - i));
    acc = hn::MulAdd(hn::MaskedLoad(m, df, a + i), hn::MaskedLoad(m, df, b + i), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

// f32 and bf16 scales and biases are read where they lie (S = float, or uint16_t for bf16
// bits); f16 ones are converted to f32 per strip first.
inline float ScaleAt(const float* p, int64_t g) { return p[g]; }
inline float ScaleAt(const uint16_t* p, int64_t g) { return bf16_to_f32(p[g]); }

// Σ bf16 a[i] · b[i] (the bias terms of bf16 biases): the same operations as DotF on the
// biases widened to f32 (bf16 -> f32 is exact), so both give the same bits.
inline float DotF(const uint16_t* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const hn::Rebind<uint32_t, decltype(df)> d32;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto widen = [&](auto v) { return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(d32, v))); };
  auto acc = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= n; i += N)
    acc = hn::MulAdd(widen(hn::LoadU(d16, a + i)), hn::LoadU(df, b + i), acc);
#if HWY_TARGET == HWY_AVX2
  // No 16-bit masked load without AVX-512 (the biases are read where they lie, up to their
  // end): a scalar tail, so bits equal DotF's only on AVX-512, which is all the tiles need.
  float sum = hn::GetLane(hn::SumOfLanes(df, acc));
  for (; i < n; ++i) sum += ScaleAt(a, i) * b[i];
  return sum;
#else
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i);
    acc = hn::MulAdd(widen(hn::MaskedLoad(hn::FirstN(d16, rest), d16, a + i)),
                     hn::MaskedLoad(hn::FirstN(df, rest), df, b + i), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
#endif
}

// The scales and biases of rows [r, r + n) as f32 (contiguous in the checkpoint: one pass).
inline void StripScales(const PackedMatrix& w, int64_t r, int64_t n, float* sc, float* sb) {
  const int64_t G = w.groups();
  ToF32(w.scale_dtype, w.scales, r * G, n * G, sc);
  ToF32(w.scale_dtype, w.biases, r * G, n * G, sb);
}

// Exactly two floats (the scales of a 128-chunk at g64), so the read never passes the row's end.
inline __m128 Load2(const float* p) {
  return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p)));
}

// Decode reads each weight once, from DRAM on a model larger than the caches, and the hardware
// prefetcher alone falls behind. The kernels request the same chunk strip_prefetch_distance() bytes
// further on with every load: spread over the compute, no burst that stalls on full fill
// buffers. An asm statement: GCC 12 deletes _mm_prefetch loops.
inline void Prefetch(const uint8_t* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }

inline int Log2(int64_t v) { return 63 - __builtin_clzll(static_cast<uint64_t>(v)); }

// E2M1 codes as the kernels multiply them, 2·value + 12 (0..24): with scale s/2 and bias -6s
// an mxfp4/nvfp4 group runs as an affine one (StripScalesFp4).
constexpr uint8_t kFp4u[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

// 64 4-bit codes (32 bytes at p) against both activation planes (low nibbles with ql/rl, high
// with qh/rh): Σ code·q · 256 + Σ code·r per lane. Lanes 0-3 sum the first 32-code block,
// lanes 4-7 the second. kFp4: E2M1 codes, looked up to kFp4u.
template <bool kFp4>
inline __m256i Dot64(const uint8_t* p, const int8_t* ql, const int8_t* qh, const int8_t* rl,
                     const int8_t* rh) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  __m256i lo = _mm256_and_si256(v, m4);
  __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  if constexpr (kFp4) {
    const __m256i lut =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4u)));
    lo = _mm256_shuffle_epi8(lut, lo), hi = _mm256_shuffle_epi8(lut, hi);
  }
  auto ld = [](const int8_t* x) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)); };
  __m256i a = DotU8S8(_mm256_setzero_si256(), lo, ld(ql));
  a = DotU8S8(a, hi, ld(qh));
  __m256i b = DotU8S8(_mm256_setzero_si256(), lo, ld(rl));
  b = DotU8S8(b, hi, ld(rh));
  return _mm256_add_epi32(_mm256_slli_epi32(a, 8), b);
}

// The scales of 64-code half h as 8 lanes (4 per 32-block).
template <typename S>
inline __m256 HalfScales(const S* sc, int64_t h, int group, int gshift) {
  if (group == 32)
    return _mm256_setr_m128(_mm_set1_ps(ScaleAt(sc, 2 * h)), _mm_set1_ps(ScaleAt(sc, 2 * h + 1)));
  return _mm256_set1_ps(ScaleAt(sc, h >> gshift));
}

#if HWY_TARGET != HWY_AVX2
// A zeroed register as a zero idiom (renamer, no port): GCC otherwise copies one zero register
// into each accumulator, a vector uop per copy.
inline __m512i Zero512() {
  __m512i z;
  asm volatile("vpxord %x0, %x0, %x0" : "=v"(z));
  return z;
}

// bf16 scales in x's low words to f32 lanes in one permutation: word idx[2j+1] into the high
// half of lane j, the low halves zeroed.
inline __m512 BfLanes(__m512i idx, __m128i x) {
  return _mm512_castsi512_ps(
      _mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx, _mm512_castsi128_si512(x)));
}
inline __m128i Load2Bf(const uint16_t* p) {  // exactly 4 bytes
  uint32_t v;
  std::memcpy(&v, p, 4);
  return _mm_cvtsi32_si128(static_cast<int>(v));
}
// Word indices for BfLanes: lanes 0-7 from scale 0 and 8-15 from scale 1 (g64), or lane j from
// scale j/4 (g32).
inline __m512i BfIdx64() {
  return _mm512_set_epi16(1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                          0, 0, 0, 0, 0, 0, 0);
}
inline __m512i BfIdx32() {
  return _mm512_set_epi16(3, 0, 3, 0, 3, 0, 3, 0, 2, 0, 2, 0, 2, 0, 2, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0,
                          0, 0, 0, 0, 0, 0, 0);
}

// The scales of 128-code chunk c of one row (scales at si), per lane: lane l covers 32-block
// l/4 (Q4Chunks, QxChunks) and its 16-code half (l/2)%2. kG: 16, 32 or 64 when the group is that
// small (16 only from f32 scales), else 0 (one scale per chunk, group >> cshift chunks).
template <int kG, typename S>
HWY_INLINE __m512 ChunkScales(const S* si, int64_t c, int cshift) {
  if constexpr (kG == 0) {
    return _mm512_set1_ps(ScaleAt(si, c >> cshift));
  } else if constexpr (kG == 16) {
    static_assert(std::is_same_v<S, float>);
    const __m512i idx16 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm512_permutexvar_ps(idx16, _mm512_castps256_ps512(_mm256_loadu_ps(si + 8 * c)));
  } else if constexpr (!std::is_same_v<S, float>) {
    return kG == 32
               ? BfLanes(BfIdx32(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(si + 4 * c)))
               : BfLanes(BfIdx64(), Load2Bf(si + 2 * c));
  } else if constexpr (kG == 32) {
    const __m512i idx32 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx32, _mm512_castps128_ps512(_mm_loadu_ps(si + 4 * c)));
  } else {
    const __m512i idx64 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx64, _mm512_castps128_ps512(Load2(si + 2 * c)));
  }
}

// The 128-code chunks of R rows (AVX-512): u[i] gets row i's Σ per lane. kG: the group size when
// 32 or 64, else 0 (one scale per chunk). kPf: each load requests the same line pf bytes (whole
// rows) further on, so every line is requested one row group ahead. A linear stream over the
// next group's bytes instead gave its last rows' first lines a fraction of that lead. Of a batch's
// pn passes over the rows, pass pt requests chunks c with c % pn == pt.
template <int R, int kG, bool kPf, bool kFp4, typename S>
inline void Q4Chunks(const PackedMatrix& w, const uint8_t* const* rp, const S* const* sp,
                     const int8_t* q4, const int8_t* r4, const float* dv, int64_t pf, __m512* u,
                     int pn, int pt) {
  const int64_t full = w.cols / 128;
  const int cshift = w.group >= 128 ? Log2(w.group / 128) : 0;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i lut =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4u)));
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) u[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < full; ++c) {
    const __m512i ql = _mm512_loadu_si512(q4 + 128 * c);
    const __m512i qh = _mm512_loadu_si512(q4 + 128 * c + 64);
    const __m512i rl = _mm512_loadu_si512(r4 + 128 * c);
    const __m512i rh = _mm512_loadu_si512(r4 + 128 * c + 64);
    const __m512 dvc = _mm512_loadu_ps(dv + 16 * c);
    const bool ahead = kPf && (pn == 1 || c % pn == pt);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512i v = _mm512_loadu_si512(rp[i] + 64 * c);
      if (ahead) Prefetch(rp[i] + 64 * c + pf);
      __m512i lo = _mm512_and_si512(v, m4);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      if constexpr (kFp4) lo = _mm512_shuffle_epi8(lut, lo), hi = _mm512_shuffle_epi8(lut, hi);
      // 256·Σcode·q + Σcode·r: the residual plane's products accumulate onto the shifted sum
      // (no second zeroed register, no add).
      __m512i acc = DotU8S8(Zero512(), lo, ql);
      acc = _mm512_slli_epi32(DotU8S8(acc, hi, qh), 8);
      acc = DotU8S8(acc, lo, rl);
      acc = DotU8S8(acc, hi, rh);
      const __m512 sv = ChunkScales<kG>(sp[i], c, cshift);
      u[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(dvc, sv), u[i]);
    }
  }
}
#endif

// y of R rows (codes at rp[i]; scales and biases at sp[i]/bp[i], G per row, f32 or bf16) for
// one token of 4-bit codes (see ActQ8::q4 for the activation order). R rows share every load of
// the activations; pf > 0 prefetches the codes that many bytes ahead. kFp4: mxfp4's E2M1 codes
// (kFp4u; f32 scales and biases from StripScalesFp4).
template <int R, bool kFp4, typename S>
inline void RowsQ4(const PackedMatrix& w, const uint8_t* const* rp, const S* const* sp,
                   const S* const* bp, const int8_t* q4, const int8_t* r4, const int8_t* q,
                   const int8_t* rr, const float* d, const float* dv, const float* gsum, float* out,
                   int64_t pf, int pn = 1, int pt = 0) {
  const int64_t cols = w.cols, full = cols / 128, halves = cols / 64, G = w.groups();
  const int gshift = w.group >= 64 ? Log2(w.group / 64) : 0;
  __m256 t[R];
  for (int i = 0; i < R; ++i) t[i] = _mm256_setzero_ps();
  int64_t h = 0;
#if HWY_TARGET != HWY_AVX2
  {
    __m512 u[R];
    if (w.group == 32)
      pf ? Q4Chunks<R, 32, true, kFp4>(w, rp, sp, q4, r4, dv, pf, u, pn, pt)
         : Q4Chunks<R, 32, false, kFp4>(w, rp, sp, q4, r4, dv, pf, u, pn, pt);
    else if (w.group == 64)
      pf ? Q4Chunks<R, 64, true, kFp4>(w, rp, sp, q4, r4, dv, pf, u, pn, pt)
         : Q4Chunks<R, 64, false, kFp4>(w, rp, sp, q4, r4, dv, pf, u, pn, pt);
    else
      pf ? Q4Chunks<R, 0, true, kFp4>(w, rp, sp, q4, r4, dv, pf, u, pn, pt)
         : Q4Chunks<R, 0, false, kFp4>(w, rp, sp, q4, r4, dv, pf, u, pn, pt);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      t[i] = _mm256_add_ps(_mm512_castps512_ps256(u[i]), _mm512_extractf32x8_ps(u[i], 1));
    h = 2 * full;
  }
#endif
  for (; h < halves; ++h) {
    const int64_t o = h < 2 * full ? 128 * (h / 2) + 32 * (h % 2) : 64 * h;
    const int64_t oh = h < 2 * full ? o + 64 : o + 32;
    const __m256 dvh = _mm256_loadu_ps(dv + 8 * h);
    for (int i = 0; i < R; ++i) {
      if (pf && h % 2 == 0 && (pn == 1 || (h / 2) % pn == pt)) Prefetch(rp[i] + 32 * h + pf);
      const __m256i acc = Dot64<kFp4>(rp[i] + 32 * h, q4 + o, q4 + oh, r4 + o, r4 + oh);
      const __m256 f = _mm256_mul_ps(dvh, HalfScales(sp[i], h, w.group, gshift));
      t[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), f, t[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    float y = HSum(t[i]);
    if (cols % 64 != 0) {  // one 32-block left, in scalar code
      const uint8_t* row = rp[i];
      const int64_t k0 = cols - 32;
      int32_t isum = 0;
      for (int64_t k = k0; k < cols; ++k) {
        const int c = (row[k / 2] >> (4 * (k & 1))) & 0xF;
        isum += (kFp4 ? kFp4u[c] : c) * (256 * q[k] + rr[k]);
      }
      y += ScaleAt(sp[i], k0 / w.group) * (d[cols / 32 - 1] / 256.0f) * static_cast<float>(isum);
    }
    out[i] = y + DotF(bp[i], gsum, G);
  }
}

#include "kernels/packed_codes_q8-inl.h"

#endif  // AVX2 / AVX3 / AVX3_DL

// quantize_block_q8's rule on nb consecutive blocks of len values (len a multiple of the
// vector), bit for bit: the same f32 operations, and NearestInt rounds to nearest even as
// lrintf does in the default rounding mode.
void QuantizeBlocksImpl(const float* x, int len, int64_t nb, int8_t* q, int8_t* r, float* d,
                        float* sum) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int N = static_cast<int>(hn::Lanes(df));
  if (len % N != 0) {
    for (int64_t b = 0; b < nb; ++b)
      quantize_block_q8(x + b * len, len, q + b * len, r + b * len, d + b, sum + b);
    return;
  }
  const auto lo = hn::Set(di, -127), hi = hn::Set(di, 127);
  const auto k256 = hn::Set(df, 256.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * len;
    auto amax = hn::Zero(df);
    for (int k = 0; k < len; k += N) amax = hn::Max(amax, hn::Abs(hn::LoadU(df, xb + k)));
    const float m = hn::GetLane(hn::MaxOfLanes(df, amax));
    const auto id = hn::Set(df, m > 0.0f ? 127.0f / m : 0.0f);
    auto qs = hn::Zero(di);
    for (int k = 0; k < len; k += N) {
      const auto v = hn::Mul(hn::LoadU(df, xb + k), id);
      const auto qi = hn::NearestInt(v);
      const auto ri = hn::Min(
          hi, hn::Max(lo, hn::NearestInt(hn::Mul(k256, hn::Sub(v, hn::ConvertTo(df, qi))))));
      hn::StoreU(hn::DemoteTo(d8, qi), d8, q + b * len + k);
      hn::StoreU(hn::DemoteTo(d8, ri), d8, r + b * len + k);
      qs = hn::Add(qs, hn::Add(hn::ShiftLeft<8>(qi), ri));
    }
    d[b] = m / 127.0f;
    sum[b] = d[b] / 256.0f * static_cast<float>(hn::GetLane(hn::SumOfLanes(di, qs)));
  }
}

bool SupportedImpl(const PackedMatrix& w) {
#ifdef TQ_Q8_KERNELS
  if (w.cols % 32 != 0) return false;
  if (w.format == WeightFormat::kMxfp4 || w.format == WeightFormat::kNvfp4) return true;
  if (w.format != WeightFormat::kAffine) return false;
  return (w.bits >= 2 && w.bits <= 6) || (w.bits == 8 && kVnni);
#else
  return false;
#endif
}

bool TilesSupportedImpl(const PackedMatrix& w) {
#if defined(TQ_Q8_KERNELS) && HWY_TARGET == HWY_AVX3_DL
  return SupportedImpl(w) && w.cols % 64 == 0;
#else
  (void)w;
  return false;
#endif
}

const char* Int8PathImpl() {
#ifdef TQ_Q8_KERNELS
  return kVnni ? "avx512-vnni" : k512 ? "avx512/avx2 (no 8-bit)" : "avx2 (no 8-bit)";
#else
  return "none";
#endif
}

#ifdef TQ_Q8_KERNELS
// The scales s of rows [r, r + n) of an mxfp4/nvfp4 matrix (e8m0_to_f32 / e4m3_to_f32
// exactly, NaN codes included) as the affine scale s/2 and bias -6s of the kernels' codes
// 2·E2M1 + 12, in vectors.
inline void StripScalesFp4(const PackedMatrix& w, int64_t r, int64_t n, float* sc, float* sb) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint32_t, decltype(df)> du32;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), total = n * w.groups();
  const uint8_t* s = w.scales + r * w.groups();
  const bool nv = w.format == WeightFormat::kNvfp4;
  int64_t i = 0;
  for (; i + N <= total; i += N) {
    const auto b8 = hn::LoadU(du8, s + i);
    const auto b32 = hn::PromoteTo(du32, b8);
    hn::Vec<decltype(df)> f;
    if (nv) {
      // E4M3 as f16 bits (sign, then exponent and mantissa 7 places up), 2^8 apart; 0x7F NaN.
      const auto b16 = hn::PromoteTo(du16, b8);
      const auto h = hn::Or(hn::ShiftLeft<8>(hn::And(b16, hn::Set(du16, 0x80))),
                            hn::ShiftLeft<7>(hn::And(b16, hn::Set(du16, 0x7F))));
      f = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, h)), hn::Set(df, 128.0f));
      const auto nan = hn::Eq(hn::And(b32, hn::Set(du32, 0x7F)), hn::Set(du32, 0x7F));
      f = hn::IfThenElse(hn::RebindMask(df, nan),
                         hn::Set(df, std::numeric_limits<float>::quiet_NaN()), f);
    } else {
      // E << 23 is 2^(E-127) (E = 255: +inf); E = 0 is the subnormal 2^-127.
      auto bits = hn::ShiftLeft<23>(b32);
      bits = hn::IfThenElse(hn::Eq(b32, hn::Zero(du32)), hn::Set(du32, 0x00400000u), bits);
      f = hn::Mul(hn::BitCast(df, bits), hn::Set(df, 0.5f));
    }
    hn::StoreU(f, df, sc + i);
    hn::StoreU(hn::Mul(f, hn::Set(df, -12.0f)), df, sb + i);
  }
  for (; i < total; ++i) {
    sc[i] = 0.5f * (nv ? e4m3_to_f32(s[i]) : e8m0_to_f32(s[i]));
    sb[i] = -12.0f * sc[i];
  }
}

#include "kernels/packed_gemm_lanes-inl.h"
#include "kernels/packed_gemm_q8-inl.h"
#endif

bool ReadsNibblesImpl(const PackedMatrix& w, int64_t n, BatchKernel kernel) {
#ifdef TQ_Q8_KERNELS
  const bool nibbles =
      (w.format == WeightFormat::kAffine && w.bits == 4) || w.format == WeightFormat::kMxfp4;
  if (!nibbles || !SupportedImpl(w)) return false;
#if HWY_TARGET == HWY_AVX3_DL
  // The lanes read x in natural order (MatmulQ8Impl's choice).
  const bool lanes = w.lanes != nullptr || kernel == BatchKernel::kTiles ||
                     (kernel == BatchKernel::kAuto && n >= kGemmMinTokens);
  if (lanes && TilesSupportedImpl(w)) return false;
#else
  (void)n, (void)kernel;
#endif
  return true;
#else
  (void)w, (void)n, (void)kernel;
  return false;
#endif
}

void MatmulQ8Impl(const PackedMatrix& w, const ActQ8& xq, float* y, int64_t ldy, int64_t r0,
                  int64_t r1, bool parts, BatchKernel kernel) {
#ifdef TQ_Q8_KERNELS
  if (!SupportedImpl(w)) return;
  // 4-bit codes in nibble order: affine, and mxfp4 through a lookup (nvfp4's groups of 16 do not
  // fit that order's lanes).
  const bool affine = w.format == WeightFormat::kAffine;
  const bool nibbles = (affine && w.bits == 4) || w.format == WeightFormat::kMxfp4;
  const int64_t cols = w.cols, nb = cols / 32, G = w.groups(), per = w.group / 32;
  thread_local std::vector<float> sc, sb, gsum;
  sc.resize(static_cast<size_t>(8 * G + kPad));
  sb.resize(static_cast<size_t>(8 * G + kPad));
  gsum.resize(static_cast<size_t>(xq.n * G + kPad));
  for (int64_t t = 0; t < xq.n; ++t)  // Σx per group per token: the bias terms
    for (int64_t g = 0; g < G; ++g) {
      float s = 0.0f;
      if (per == 0) {  // groups of 16 (nvfp4): half a block, summed as the kernels see x
        int32_t isum = 0;
        for (int64_t k = g * 16; k < g * 16 + 16; ++k)
          isum += 256 * xq.q[t * cols + k] + xq.r[t * cols + k];
        s = xq.d[t * nb + g / 2] / 256.0f * static_cast<float>(isum);
      }
      for (int64_t b = 0; b < per; ++b) s += xq.sum[t * nb + g * per + b];
      gsum[t * G + g] = s;
    }
#if HWY_TARGET == HWY_AVX3_DL
  // A batch of tokens: strips unpacked once with rows in the lanes (packed_gemm_lanes-inl.h), or
  // 8-bit codes on register tiles (packed_gemm_q8-inl.h), which give each token the per-token
  // kernel's bits.
  // 8-bit batches that must keep the per-token bits (speculative checks, short batches) take the
  // tiles; prefills (16+ tokens, or the server's chunks) the lanes, which are faster.
  const bool lanes = w.lanes != nullptr || kernel == BatchKernel::kTiles ||
                     (kernel == BatchKernel::kAuto && xq.n >= kGemmMinTokens);
  const bool same_bits = affine && w.bits == 8 && xq.n >= 2 && !lanes;
  if ((lanes || same_bits) && TilesSupportedImpl(w)) {
    if (same_bits)
      GemmQ8(w, xq, gsum.data(), y, ldy, r0, r1, parts);
    else
      GemmLanes(w, xq, gsum.data(), y, ldy, r0, r1);
    return;
  }
  // Narrow codes run in 128-code chunks with x in their order (packed_codes_q8-inl.h).
  thread_local std::vector<int8_t> qx, rx;
  if (!nibbles && w.bits < 8) ActChunkOrder(xq, &qx, &rx);
#else
  // Without VBMI the narrow codes meet x as 16-bit 256·q + r (packed_codes_q8-inl.h).
  thread_local std::vector<int16_t> x16;
  if (!nibbles) ActX16(xq, &x16);
#endif
  const StripPlan plan(w, r0, r1, parts);
  const int64_t pf_bytes = strip_prefetch_distance(w, plan), rb = w.row_bytes();
  // Scales and biases are two more streams, an eighth of the codes' bytes at 4-bit g64: each
  // segment's as many rows ahead as the codes' prefetch, or each strip waits on their misses.
  const int64_t sbytes = G * static_cast<int64_t>(dtype_size(w.scale_dtype));
  const int64_t pf_rows = pf_bytes / rb;
  // A strip of R rows stays in L1 while every token passes over it (kernels/strip_plan.h).
  for (int64_t k = 0; k < plan.strips; ++k) {
    int64_t seg0[8], seg_n[8], idx[8];
    const int nseg = plan.segments(k, seg0, seg_n);
    int m = 0;
    // f32 and bf16 scales are read where they lie (bf16 widened by the kernels' permutation:
    // converting each strip cost decode time), f16 ones converted here.
    // mxfp4/nvfp4 scales (E8M0/E4M3 bytes) are converted here too.
    const bool bf16 = affine && w.scale_dtype == DType::kBF16;
    const bool direct = bf16 || (affine && w.scale_dtype == DType::kF32);
    for (int s = 0; s < nseg; ++s) {
      const int64_t ahead = seg0[s] + pf_rows;
      if (ahead < w.rows) {
        const int64_t lo = ahead * sbytes, hi = std::min(ahead + seg_n[s], w.rows) * sbytes;
        for (int64_t o = lo & ~int64_t{63}; o < hi; o += 64) {
          Prefetch(w.scales + o);
          if (affine) Prefetch(w.biases + o);
        }
      }
      if (!affine)
        StripScalesFp4(w, seg0[s], seg_n[s], sc.data() + m * G, sb.data() + m * G);
      else if (!direct)
        StripScales(w, seg0[s], seg_n[s], sc.data() + m * G, sb.data() + m * G);
      for (int64_t i = 0; i < seg_n[s]; ++i) idx[m++] = seg0[s] + i;
    }
    const uint8_t* rp[8];
    const float *spf[8], *bpf[8];
    const uint16_t *sph[8], *bph[8];
    for (int i = 0; i < m; ++i) {
      rp[i] = w.data + idx[i] * rb;
      if (bf16) {
        sph[i] = reinterpret_cast<const uint16_t*>(w.scales) + idx[i] * G;
        bph[i] = reinterpret_cast<const uint16_t*>(w.biases) + idx[i] * G;
      } else if (direct) {
        spf[i] = reinterpret_cast<const float*>(w.scales) + idx[i] * G;
        bpf[i] = reinterpret_cast<const float*>(w.biases) + idx[i] * G;
      } else {
        spf[i] = sc.data() + i * G;
        bpf[i] = sb.data() + i * G;
      }
    }
    for (int64_t t = 0; t < xq.n; ++t) {
      const int8_t* q = xq.q.data() + t * cols;
      const int8_t* rr = xq.r.data() + t * cols;
      const float* d = xq.d.data() + t * nb;
      const float* gs = gsum.data() + t * G;
      const int8_t* q4 = xq.q4.data() + t * cols;
      const int8_t* r4 = xq.r4.data() + t * cols;
      const float* dv = xq.dv.data() + t * (cols / 64) * 8;
      const float* dv8 = xq.dv8.data() + t * (cols / 64) * 16;
      float* yt = y + t * ldy;
      // Rows at a time share the activation loads; the strip's last rows one by one.
      auto rows = [&]<int kR>(int j) {
        // Each pass over the strip (one per token) requests its share of the codes ahead,
        // chunk c in pass c % n: the first pass alone left DRAM idle while the others computed.
        const int64_t pf = pf_bytes;
        const int pn = static_cast<int>(xq.n), pt = static_cast<int>(t);
        float out[kR];
        auto run = [&](auto sp, auto bp) {
          using S = std::remove_const_t<
              std::remove_pointer_t<std::remove_const_t<std::remove_pointer_t<decltype(sp)>>>>;
          if (nibbles) {
            if (affine)
              RowsQ4<kR, false>(w, rp + j, sp + j, bp + j, q4, r4, q, rr, d, dv, gs, out, pf, pn,
                                pt);
            else if constexpr (std::is_same_v<S, float>)
              RowsQ4<kR, true>(w, rp + j, sp + j, bp + j, q4, r4, q, rr, d, dv, gs, out, pf, pn,
                               pt);
            return;
          }
#if HWY_TARGET == HWY_AVX3_DL
          const int8_t* qxt = qx.data() + t * cols;
          const int8_t* rxt = rx.data() + t * cols;
          if (!affine) {
            if constexpr (std::is_same_v<S, float>)
              RowsQx<kR, true, true>(w, rp + j, sp + j, bp + j, q, rr, qxt, rxt, d, dv, dv8, gs,
                                     out, pf, pn, pt);
          } else if (w.bits == 8) {
            RowsQx<kR, false, false>(w, rp + j, sp + j, bp + j, q, rr, q, rr, d, dv, dv8, gs, out,
                                     pf, pn, pt);
          } else {
            RowsQx<kR, true, false>(w, rp + j, sp + j, bp + j, q, rr, qxt, rxt, d, dv, dv8, gs, out,
                                    pf, pn, pt);
          }
#else
          (void)dv8;
          const int16_t* xt = x16.data() + t * cols;
          const int64_t pf0 = t == 0 ? pf : 0;  // these kernels request ahead in the first pass
#if HWY_TARGET == HWY_AVX3
          if (!affine)
            RowsQx512w<kR, true>(w, rp + j, sp + j, bp + j, xt, d, dv8, q, rr, gs, out, pf0);
          else
            RowsQx512w<kR, false>(w, rp + j, sp + j, bp + j, xt, d, dv8, q, rr, gs, out, pf0);
#else
          if (!affine)
            RowsQx256<kR, true>(w, rp + j, sp + j, bp + j, xt, d, gs, out, pf0);
          else
            RowsQx256<kR, false>(w, rp + j, sp + j, bp + j, xt, d, gs, out, pf0);
#endif
#endif
        };
        if (bf16)
          run(static_cast<const uint16_t* const*>(sph), static_cast<const uint16_t* const*>(bph));
        else
          run(static_cast<const float* const*>(spf), static_cast<const float* const*>(bpf));
        for (int i = 0; i < kR; ++i) yt[idx[j + i]] = out[i];
      };
      int j = 0;
      // 4-bit: eight rows at a time (SmolLM2's 576-column rows have a large fixed cost per row;
      // 8-bit codes ran slower with eight).
      if (w.bits <= 6 && m == 8) rows.template operator()<8>(0), j = 8;
      for (; j + 4 <= m; j += 4) rows.template operator()<4>(j);
      for (; j < m; ++j) rows.template operator()<1>(j);
    }
  }
#else
  (void)w, (void)xq, (void)y, (void)ldy, (void)r0, (void)r1, (void)parts;
#endif
}

std::vector<uint8_t> PackLanesImpl(const PackedMatrix& w) {
  std::vector<uint8_t> out;
#if defined(TQ_Q8_KERNELS) && HWY_TARGET == HWY_AVX3_DL
  // 2- and 3-bit codes fit the nibbles too (4 bits a code where they had 2 or 3).
  if (w.format != WeightFormat::kAffine || w.bits > 4 || !TilesSupportedImpl(w)) return out;
  const int64_t strips = (w.rows + kLaneRows - 1) / kLaneRows, G = w.groups();
  const auto es = static_cast<int64_t>(dtype_size(w.scale_dtype));
  out.resize(static_cast<size_t>(strips * (16 * w.cols + 2 * G * kLaneRows * es)));
  uint8_t* sp = out.data() + strips * 16 * w.cols;
  for (int64_t k = 0; k < strips; ++k) {
    PackLanesStrip(w, k * kLaneRows, out.data() + k * 16 * w.cols);
    for (const uint8_t* v : {w.scales, w.biases})
      for (int64_t g = 0; g < G; ++g)
        for (int64_t i = 0; i < kLaneRows; ++i, sp += es)
          std::memcpy(sp, v + (std::min(k * kLaneRows + i, w.rows - 1) * G + g) * es,
                      static_cast<size_t>(es));
  }
#else
  (void)w;
#endif
  return out;
}

#undef TQ_Q8_KERNELS
#undef TQ_Q8_VNNI_TARGET

}  // namespace HWY_NAMESPACE
}  // namespace tq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq {

HWY_EXPORT(SupportedImpl);
HWY_EXPORT(TilesSupportedImpl);
HWY_EXPORT(ReadsNibblesImpl);
HWY_EXPORT(QuantizeBlocksImpl);
HWY_EXPORT(MatmulQ8Impl);
HWY_EXPORT(Int8PathImpl);
HWY_EXPORT(PackLanesImpl);

std::vector<uint8_t> pack_lanes(const PackedMatrix& w) {
  return HWY_DYNAMIC_DISPATCH(PackLanesImpl)(w);
}

void use_lanes(PackedMatrix& w, const std::vector<uint8_t>& packed) {
  w.lanes = packed.data();
  w.lane_scales = packed.data() + (w.rows + 31) / 32 * 16 * w.cols;
}

const char* packed_int8_path() { return HWY_DYNAMIC_DISPATCH(Int8PathImpl)(); }

void quantize_blocks_q8(const float* x, int len, int64_t nb, int8_t* q, int8_t* r, float* d,
                        float* sum) {
  HWY_DYNAMIC_DISPATCH(QuantizeBlocksImpl)(x, len, nb, q, r, d, sum);
}

bool packed_q8_supported(const PackedMatrix& w) { return HWY_DYNAMIC_DISPATCH(SupportedImpl)(w); }

bool packed_q8_tiles_supported(const PackedMatrix& w) {
  return HWY_DYNAMIC_DISPATCH(TilesSupportedImpl)(w);
}

bool packed_q8_reads_nibbles(const PackedMatrix& w, int64_t n, BatchKernel kernel) {
  return HWY_DYNAMIC_DISPATCH(ReadsNibblesImpl)(w, n, kernel);
}

void packed_matmul_q8(const PackedMatrix& w, const ActQ8& xq, float* y, int64_t ldy, int64_t r0,
                      int64_t r1, bool parts, BatchKernel kernel) {
  HWY_DYNAMIC_DISPATCH(MatmulQ8Impl)(w, xq, y, ldy, r0, r1, parts, kernel);
}

}  // namespace tq
#endif  // HWY_ONCE
