// Integer dot-product kernels of packed_matmul_q8 (affine weights × int8 activations), one
// per ISA through Highway's foreach_target: AVX-512 VNNI vpdpbusd on AVX3_DL (4- and 8-bit),
// AVX2 vpmaddubsw on AVX2/AVX3 (4-bit only: 8-bit codes would saturate its i16 sums).
// Scalar reference: packed_matmul_q8_ref (kernels/packed_ref.cc).
#include <algorithm>
#include <cstring>

#include "kernels/packed_matmul.h"

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

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
// Highway 1.0.3's AVX3_DL names "avxvnni" but not the EVEX form its CPU check requires.
#pragma GCC target("avx512vnni")
#endif
namespace tq {
namespace HWY_NAMESPACE {

inline float ScaleAtQ8(DType t, const uint8_t* base, int64_t i) {
  uint16_t h;
  float f;
  if (t == DType::kF32) {
    std::memcpy(&f, base + 4 * i, 4);
    return f;
  }
  std::memcpy(&h, base + 2 * i, 2);
  return t == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
}

#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
#define TQ_Q8_KERNELS 1

constexpr bool kVnni = HWY_TARGET == HWY_AVX3_DL;

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Σ over 4-byte lanes of u8 codes × s8 activations (codes < 16 when !kVnni).
inline __m256i DotU8S8(__m256i acc, __m256i u, __m256i s) {
  if constexpr (kVnni) {
    return _mm256_dpbusd_epi32(acc, u, s);
  } else {
    const __m256i p = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
}

// Σ over the row's groups of b·Σx (the activations' exact block sums).
inline float BiasTerm(const PackedMatrix& w, int64_t r, const float* sums) {
  const int64_t G = w.groups(), per = w.group / 32;
  float acc = 0.0f;
  for (int64_t g = 0; g < G; ++g) {
    float s = 0.0f;
    for (int64_t b = 0; b < per; ++b) s += sums[g * per + b];
    acc += ScaleAtQ8(w.scale_dtype, w.biases, r * G + g) * s;
  }
  return acc;
}

// One 32-code block the vector loop left over (cols % 64 == 32), in scalar code.
inline float TailBlock(const PackedMatrix& w, int64_t r, const int8_t* q, float d) {
  const uint8_t* row = w.data + r * w.row_bytes();
  const int64_t k0 = w.cols - 32;
  int32_t isum = 0;
  for (int64_t k = k0; k < w.cols; ++k) {
    const int code = w.bits == 4 ? (row[k / 2] >> (4 * (k & 1))) & 0xF : row[k];
    isum += code * q[k];
  }
  const float s = ScaleAtQ8(w.scale_dtype, w.scales, r * w.groups() + k0 / w.group);
  return s * d * static_cast<float>(isum);
}

// y of row r for one token of 4-bit codes: 64 codes (32 bytes) per step, the low nibbles
// against the even activations and the high nibbles against the odd ones (ActQ8::q4).
inline float RowQ4(const PackedMatrix& w, int64_t r, const int8_t* q4, const int8_t* q,
                   const float* d, const float* dv, const float* sums) {
  const uint8_t* row = w.data + r * w.row_bytes();
  const int64_t chunks = w.cols / 64, G = w.groups();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 t0 = _mm256_setzero_ps(), t1 = t0;
  for (int64_t c = 0; c < chunks; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * c));
    const __m256i lo = _mm256_and_si256(v, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    __m256i acc = DotU8S8(_mm256_setzero_si256(), lo,
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q4 + 64 * c)));
    acc = DotU8S8(acc, hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q4 + 64 * c + 32)));
    __m256 sv;
    if (w.group == 32) {
      sv = _mm256_setr_m128(_mm_set1_ps(ScaleAtQ8(w.scale_dtype, w.scales, r * G + 2 * c)),
                            _mm_set1_ps(ScaleAtQ8(w.scale_dtype, w.scales, r * G + 2 * c + 1)));
    } else {
      sv = _mm256_set1_ps(ScaleAtQ8(w.scale_dtype, w.scales, r * G + 64 * c / w.group));
    }
    const __m256 f = _mm256_mul_ps(_mm256_loadu_ps(dv + 8 * c), sv);
    if (c & 1)
      t1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), f, t1);
    else
      t0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), f, t0);
  }
  float y = HSum(_mm256_add_ps(t0, t1)) + BiasTerm(w, r, sums);
  if (w.cols % 64 != 0) y += TailBlock(w, r, q, d[w.cols / 32 - 1]);
  return y;
}

// 8-bit codes, VNNI only: 32 codes (one activation block) per step.
inline float RowQ8(const PackedMatrix& w, int64_t r, const int8_t* q, const float* d,
                   const float* sums) {
  const uint8_t* row = w.data + r * w.row_bytes();
  const int64_t blocks = w.cols / 32, G = w.groups(), per = w.group / 32;
  __m256 t0 = _mm256_setzero_ps(), t1 = t0;
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i acc = DotU8S8(
        _mm256_setzero_si256(),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * b)),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b)));
    const __m256 f = _mm256_set1_ps(d[b] * ScaleAtQ8(w.scale_dtype, w.scales, r * G + b / per));
    if (b & 1)
      t1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), f, t1);
    else
      t0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), f, t0);
  }
  return HSum(_mm256_add_ps(t0, t1)) + BiasTerm(w, r, sums);
}

#endif  // AVX2 / AVX3 / AVX3_DL

bool SupportedImpl(const PackedMatrix& w) {
#ifdef TQ_Q8_KERNELS
  if (w.format != WeightFormat::kAffine || w.cols % 32 != 0) return false;
  return w.bits == 4 || (w.bits == 8 && kVnni);
#else
  return false;
#endif
}

void MatmulQ8Impl(const PackedMatrix& w, const ActQ8& xq, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
#ifdef TQ_Q8_KERNELS
  if (!SupportedImpl(w)) return;
  const int64_t cols = w.cols, nb = cols / 32, nv = cols / 64 * 8;
  // Strips of rows stay in L1 while every token passes over them.
  constexpr int64_t kStrip = 8;
  for (int64_t rs = r0; rs < r1; rs += kStrip) {
    const int64_t re = std::min(r1, rs + kStrip);
    for (int64_t t = 0; t < xq.n; ++t) {
      const int8_t* q = xq.q.data() + t * cols;
      const float* d = xq.d.data() + t * nb;
      const float* sums = xq.sum.data() + t * nb;
      if (w.bits == 4) {
        const int8_t* q4 = xq.q4.data() + t * cols;
        const float* dv = xq.dv.data() + t * nv;
        for (int64_t r = rs; r < re; ++r) y[t * ldy + r] = RowQ4(w, r, q4, q, d, dv, sums);
      } else {
        for (int64_t r = rs; r < re; ++r) y[t * ldy + r] = RowQ8(w, r, q, d, sums);
      }
    }
  }
#else
  (void)w, (void)xq, (void)y, (void)ldy, (void)r0, (void)r1;
#endif
}

#undef TQ_Q8_KERNELS

}  // namespace HWY_NAMESPACE
}  // namespace tq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tq {

HWY_EXPORT(SupportedImpl);
HWY_EXPORT(MatmulQ8Impl);

bool packed_q8_supported(const PackedMatrix& w) { return HWY_DYNAMIC_DISPATCH(SupportedImpl)(w); }

void packed_matmul_q8(const PackedMatrix& w, const ActQ8& xq, float* y, int64_t ldy, int64_t r0,
                      int64_t r1) {
  HWY_DYNAMIC_DISPATCH(MatmulQ8Impl)(w, xq, y, ldy, r0, r1);
}

}  // namespace tq
#endif  // HWY_ONCE
