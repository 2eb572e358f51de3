// AMX tile kernel of the prefill products (kernels/amx_matmul.h). Tiles: 0/7 = 16 weight rows ×
// 64 codes (u8), 1/2 = the q/r planes of 16 tokens × 64 k (s8, 4-k groups), 3/4 and 5/6 = their
// int32 products (two sets, for alternate blocks). Per 64-block the two products are combined as
// in the reference (256·Σcq + Σcr), scaled by s·d/256 and summed with b·Σx in f32 registers, 16
// tokens per register.
#include "kernels/amx_matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "formats/mlx_quant.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TQ_AMX 1
#include <cpuid.h>
#include <hwy/targets.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
// GCC 12's AVX-512 headers build casts from _mm512_undefined_*: false alarms.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace tq {

void act_tiles_init(int64_t n, int64_t cols, ActTiles* out) {
  const int64_t nb = cols / 64, blocks = (n + 15) / 16;
  out->n = n, out->cols = cols, out->blocks = blocks;
  out->q.resize(static_cast<size_t>(blocks * nb * 1024));
  out->r.resize(out->q.size());
  out->dv.resize(static_cast<size_t>(blocks * nb * 16));
  out->sum.resize(out->dv.size());
  const int64_t tb = blocks - 1, m0 = n - tb * 16;  // tokens m0..15 of the last block are padding
  for (int64_t b = 0; b < nb && m0 < 16; ++b) {
    const int64_t tile = (tb * nb + b) * 1024;
    for (int64_t kr = 0; kr < 16; ++kr) {
      std::memset(&out->q[tile + kr * 64 + m0 * 4], 0, static_cast<size_t>((16 - m0) * 4));
      std::memset(&out->r[tile + kr * 64 + m0 * 4], 0, static_cast<size_t>((16 - m0) * 4));
    }
    for (int64_t m = m0; m < 16; ++m)
      out->dv[(tb * nb + b) * 16 + m] = 0.0f, out->sum[(tb * nb + b) * 16 + m] = 0.0f;
  }
}

bool amx_supported(const PackedMatrix& w) {
  return w.format == WeightFormat::kAffine && w.group % 64 == 0 && w.rows % 16 == 0 &&
         w.biases != nullptr;
}

namespace {

size_t tile_at(const ActTiles& xt, int64_t t, int64_t k) {
  return static_cast<size_t>(((t / 16) * (xt.cols / 64) + k / 64) * 1024 + (k % 64) / 4 * 64 +
                             (t % 16) * 4 + k % 4);
}

// Quantizes tokens [t0, t1): each token's 64-blocks in SIMD (quantize_blocks_q8), then their
// 4-byte groups scattered to the tile rows.
void quantize_tiles_with(const float* x, int64_t t0, int64_t t1, ActTiles* out) {
  const int64_t cols = out->cols, nb = cols / 64;
  thread_local std::vector<int8_t> q, r;
  thread_local std::vector<float> d, sum;
  q.resize(static_cast<size_t>(cols)), r.resize(static_cast<size_t>(cols));
  d.resize(static_cast<size_t>(nb)), sum.resize(static_cast<size_t>(nb));
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t tb = t / 16, m = t % 16;
    quantize_blocks_q8(x + t * cols, 64, nb, q.data(), r.data(), d.data(), sum.data());
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t tile = (tb * nb + b) * 1024, v = (tb * nb + b) * 16 + m;
      out->sum[v] = sum[b];
      out->dv[v] = d[b] / 256.0f;
      for (int64_t kr = 0; kr < 16; ++kr) {
        std::memcpy(&out->q[tile + kr * 64 + m * 4], &q[b * 64 + kr * 4], 4);
        std::memcpy(&out->r[tile + kr * 64 + m * 4], &r[b * 64 + kr * 4], 4);
      }
    }
  }
}

}  // namespace

int8_t act_tile_q(const ActTiles& xt, int64_t t, int64_t k) { return xt.q[tile_at(xt, t, k)]; }
int8_t act_tile_r(const ActTiles& xt, int64_t t, int64_t k) { return xt.r[tile_at(xt, t, k)]; }

void packed_matmul_tiles_ref(const PackedMatrix& w, const ActTiles& xt, float* y, int64_t ldy,
                             int64_t r0, int64_t r1) {
  const int64_t nb = w.cols / 64, per = w.group / 64, G = w.groups();
  for (int64_t row = r0; row < r1; ++row) {
    const uint8_t* codes = w.data + row * w.row_bytes();
    for (int64_t t = 0; t < xt.n; ++t) {
      double acc = 0.0;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        for (int64_t k = b * 64; k < b * 64 + 64; ++k)
          isum += static_cast<int32_t>(unpack_code(codes, k, w.bits)) *
                  (256 * act_tile_q(xt, t, k) + act_tile_r(xt, t, k));
        const size_t v = static_cast<size_t>(((t / 16) * nb + b) * 16 + t % 16);
        const int64_t gi = row * G + b / per;
        acc += static_cast<double>(scale_at(w.scale_dtype, w.scales, gi)) * xt.dv[v] * isum +
               static_cast<double>(scale_at(w.scale_dtype, w.biases, gi)) * xt.sum[v];
      }
      y[t * ldy + row] = static_cast<float>(acc);
    }
  }
}

#ifdef TQ_AMX

// Functions compiled for AMX live in this namespace only: scripts/isa-audit allows tile and
// AVX-512 instructions there and nowhere else outside Highway's targets.
namespace amx_target {
namespace {

#define TQ_AMX_TARGET \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,fma,bmi2")))

struct TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// 16 rows of 4-bit codes (two per byte, low nibble first) to bytes in tile order (see
// strip_codes), 64 codes per step.
TQ_AMX_TARGET void unpack4_rows(const uint8_t* src, int64_t src_stride, int64_t cols,
                                uint8_t* dst) {
  const __m512i lo = _mm512_set1_epi16(0x000F), hi = _mm512_set1_epi16(0x0F00);
  for (int i = 0; i < 16; ++i) {
    const uint8_t* s = src + i * src_stride;
    for (int64_t k = 0; k < cols; k += 64) {
      const __m512i t =
          _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k / 2)));
      const __m512i v =
          _mm512_or_si512(_mm512_and_si512(t, lo), _mm512_and_si512(_mm512_slli_epi16(t, 4), hi));
      _mm512_storeu_si512(dst + k * 16 + i * 64, v);
    }
  }
}

// acc[i] (16 tokens of row i) += (256·cq + cr)[i] · d · s[i] + b[i] · Σx, for one 64-block.
TQ_AMX_TARGET __attribute__((always_inline)) inline void scale_block(
    __m512* acc, const int32_t* cq, const int32_t* cr, const float* dv, const float* sm,
    const float* sg, const float* bg) {
  const __m512 d = _mm512_loadu_ps(dv), s = _mm512_loadu_ps(sm);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    const __m512i c = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(cq + 16 * i), 8),
                                       _mm512_load_si512(cr + 16 * i));
    acc[i] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), _mm512_mul_ps(d, _mm512_set1_ps(sg[i])), acc[i]);
    acc[i] = _mm512_fmadd_ps(s, _mm512_set1_ps(bg[i]), acc[i]);
  }
}

// A row of 2/3/5/6-bit codes to bytes: every 8 codes fill `bits` whole bytes, spread to 8 bytes
// by one pdep (unpack_codes' shift and mask per code made every AMX forward of these widths pay
// for a whole model's codes, whatever its tokens).
template <int kBits>
TQ_AMX_TARGET inline void unpack_narrow_t(const uint8_t* src, int64_t cols, uint8_t* dst) {
  constexpr uint64_t kMask = 0x0101010101010101ull * ((1u << kBits) - 1);
  const int64_t groups = cols / 8;
  for (int64_t i = 0; i < groups; ++i) {
    // pdep reads only the low 8·kBits bits: one 8-byte load where it stays in the row.
    uint64_t v = 0;
    if (i * kBits + 8 <= groups * kBits)
      std::memcpy(&v, src + i * kBits, 8);
    else
      std::memcpy(&v, src + i * kBits, kBits);
    const uint64_t out = _pdep_u64(v, kMask);
    std::memcpy(dst + 8 * i, &out, 8);
  }
}
TQ_AMX_TARGET inline void unpack_narrow(const uint8_t* src, int64_t cols, int bits, uint8_t* dst) {
  switch (bits) {
    case 2:
      return unpack_narrow_t<2>(src, cols, dst);
    case 3:
      return unpack_narrow_t<3>(src, cols, dst);
    case 5:
      return unpack_narrow_t<5>(src, cols, dst);
    case 6:
      return unpack_narrow_t<6>(src, cols, dst);
    default:
      unpack_codes(src, 0, cols, bits, dst);
  }
}

// Codes of rows [n0, n0 + 16) as bytes in tile order, [K / 64][16 rows][64]: each 64-block
// is one contiguous 1 KB tile (rows in place at stride K put 16 lines of a tile in 2 L1 sets
// when K is 2048); with their scales and biases as f32, [group][16], into st/bt.
TQ_AMX_TARGET const uint8_t* strip_codes(const PackedMatrix& w, int64_t n0, uint8_t* strip,
                                         float* st, float* bt) {
  const int64_t K = w.cols, G = w.groups();
  for (int64_t g = 0; g < G; ++g)
    for (int i = 0; i < 16; ++i) {
      st[g * 16 + i] = scale_at(w.scale_dtype, w.scales, (n0 + i) * G + g);
      bt[g * 16 + i] = scale_at(w.scale_dtype, w.biases, (n0 + i) * G + g);
    }
  const uint8_t* a = w.data + n0 * w.row_bytes();
  if (w.bits == 4) {
    unpack4_rows(a, w.row_bytes(), K, strip);
    return strip;
  }
  thread_local std::vector<uint8_t> row;
  row.resize(static_cast<size_t>(K));
  for (int i = 0; i < 16; ++i) {
    const uint8_t* codes = a + i * w.row_bytes();
    if (w.bits != 8) {
      unpack_narrow(codes, K, w.bits, row.data());
      codes = row.data();
    }
    for (int64_t k = 0; k < K; k += 64)
      _mm512_storeu_si512(strip + k * 16 + i * 64, _mm512_loadu_si512(codes + k));
  }
  return strip;
}

// Token block tb times RB strips of 16 rows (RB = 2 shares each activation tile load between
// two weight tiles: tiles 0/1 weights, 2/3 the q/r planes, 4..7 the products).
template <int RB>
TQ_AMX_TARGET __attribute__((always_inline)) inline void tile_block(
    const PackedMatrix& w, const ActTiles& xt, const uint8_t* const* a, const float* const* st,
    const float* const* bt, int64_t tb, int64_t n0, float* y, int64_t ldy) {
  const int64_t K = w.cols, nb = K / 64, per = w.group / 64;
  alignas(64) int32_t c[4][256];
  alignas(64) float out[256];
  const int8_t* bq = xt.q.data() + tb * nb * 1024;
  const int8_t* br = xt.r.data() + tb * nb * 1024;
  const float* dv = xt.dv.data() + tb * nb * 16;
  const float* sm = xt.sum.data() + tb * nb * 16;
  __m512 acc[RB * 16];
#pragma GCC unroll 32
  for (int i = 0; i < RB * 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    _tile_loadd(2, bq + b * 1024, 64);
    _tile_loadd(3, br + b * 1024, 64);
    _tile_loadd(0, a[0] + b * 1024, 64);
    _tile_zero(4);
    _tile_zero(5);
    _tile_dpbusd(4, 0, 2);
    _tile_dpbusd(5, 0, 3);
    if constexpr (RB == 2) {
      _tile_loadd(1, a[1] + b * 1024, 64);
      _tile_zero(6);
      _tile_zero(7);
      _tile_dpbusd(6, 1, 2);
      _tile_dpbusd(7, 1, 3);
    }
    _tile_stored(4, c[0], 64);
    _tile_stored(5, c[1], 64);
    if constexpr (RB == 2) {
      _tile_stored(6, c[2], 64);
      _tile_stored(7, c[3], 64);
    }
    const int64_t g = (b / per) * 16;
    scale_block(acc, c[0], c[1], dv + b * 16, sm + b * 16, st[0] + g, bt[0] + g);
    if constexpr (RB == 2)
      scale_block(acc + 16, c[2], c[3], dv + b * 16, sm + b * 16, st[1] + g, bt[1] + g);
  }
  const int64_t mmax = std::min<int64_t>(16, xt.n - tb * 16);
  for (int h = 0; h < RB; ++h) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) _mm512_store_ps(out + 16 * i, acc[h * 16 + i]);
    for (int64_t m = 0; m < mmax; ++m) {
      float* yr = y + (tb * 16 + m) * ldy + n0 + h * 16;
      for (int i = 0; i < 16; ++i) yr[i] = out[i * 16 + m];
    }
  }
}

TQ_AMX_TARGET void amx_rows(const PackedMatrix& w, const ActTiles& xt, float* y, int64_t ldy,
                            int64_t r0, int64_t r1) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
  const int64_t K = w.cols, G = w.groups();
  thread_local std::vector<uint8_t> strips;
  thread_local std::vector<float> scales;
  strips.resize(static_cast<size_t>(32 * K));
  scales.resize(static_cast<size_t>(4 * G * 16));
  uint8_t* strip[2] = {strips.data(), strips.data() + 16 * K};
  float* st[2] = {scales.data(), scales.data() + G * 16};
  float* bt[2] = {scales.data() + 2 * G * 16, scales.data() + 3 * G * 16};
  const uint8_t* a[2] = {nullptr, nullptr};
  // Token blocks per pass: both planes of them stay in L2 while the weight strips go by.
  const int64_t chunk = std::max<int64_t>(1, (1 << 20) / (2 * 16 * K));
  for (int64_t b0 = 0; b0 < xt.blocks; b0 += chunk) {
    const int64_t b1 = std::min(xt.blocks, b0 + chunk);
    for (int64_t n0 = r0; n0 < r1; n0 += 32) {
      const int rb = n0 + 32 <= r1 ? 2 : 1;
      for (int h = 0; h < rb; ++h) a[h] = strip_codes(w, n0 + 16 * h, strip[h], st[h], bt[h]);
      for (int64_t tb = b0; tb < b1; ++tb) {
        if (rb == 2)
          tile_block<2>(w, xt, a, st, bt, tb, n0, y, ldy);
        else
          tile_block<1>(w, xt, a, st, bt, tb, n0, y, ldy);
      }
    }
  }
  _tile_release();
}

// dst row kr (64 bytes at dst + 64 kr) = the kr-th 4-byte group of each of the 16 rows at
// src + m · stride (m = 0..15): a 16x16 transpose of 32-bit lanes, in 64 shuffles.
TQ_AMX_TARGET void transpose_groups(const int8_t* src, int64_t stride, int8_t* dst) {
  __m512i r[16], t[16];
  for (int m = 0; m < 16; ++m) r[m] = _mm512_loadu_si512(src + m * stride);
  for (int m = 0; m < 16; m += 2) {  // per 128-bit chunk: rows m, m+1 interleaved
    t[m] = _mm512_unpacklo_epi32(r[m], r[m + 1]);
    t[m + 1] = _mm512_unpackhi_epi32(r[m], r[m + 1]);
  }
  for (int m = 0; m < 16; m += 4) {  // r[m + j], chunk c: group 4c + j of rows m..m+3
    r[m] = _mm512_unpacklo_epi64(t[m], t[m + 2]);
    r[m + 1] = _mm512_unpackhi_epi64(t[m], t[m + 2]);
    r[m + 2] = _mm512_unpacklo_epi64(t[m + 1], t[m + 3]);
    r[m + 3] = _mm512_unpackhi_epi64(t[m + 1], t[m + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // a 4x4 transpose of 128-bit chunks for each j
    const __m512i v0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xEE);
    _mm512_storeu_si512(dst + (0 + j) * 64, _mm512_shuffle_i32x4(v0, v2, 0x88));
    _mm512_storeu_si512(dst + (4 + j) * 64, _mm512_shuffle_i32x4(v0, v2, 0xDD));
    _mm512_storeu_si512(dst + (8 + j) * 64, _mm512_shuffle_i32x4(v1, v3, 0x88));
    _mm512_storeu_si512(dst + (12 + j) * 64, _mm512_shuffle_i32x4(v1, v3, 0xDD));
  }
}

}  // namespace
}  // namespace amx_target

// Whole blocks of 16 tokens: quantized row by row, then each tile transposed into place (the
// scalar scatter of 4-byte groups was ~3.5% of a SmolLM2 8-bit 128-token prefill); the rest of
// the range as quantize_tiles_with.
void quantize_act_tiles(const float* x, int64_t t0, int64_t t1, ActTiles* out) {
  const int64_t cols = out->cols, nb = cols / 64;
  thread_local std::vector<int8_t> q, r;
  thread_local std::vector<float> d, sum;
  for (int64_t t = t0; t < t1;) {
    const int64_t end = std::min(t1, (t / 16 + 1) * 16);
    if (t % 16 != 0 || end - t != 16 || !amx_available()) {
      quantize_tiles_with(x, t, end, out);
      t = end;
      continue;
    }
    q.resize(static_cast<size_t>(16 * cols)), r.resize(q.size());
    d.resize(static_cast<size_t>(16 * nb)), sum.resize(d.size());
    for (int64_t m = 0; m < 16; ++m)
      quantize_blocks_q8(x + (t + m) * cols, 64, nb, q.data() + m * cols, r.data() + m * cols,
                         d.data() + m * nb, sum.data() + m * nb);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t tile = (t / 16 * nb + b) * 1024, v = (t / 16 * nb + b) * 16;
      amx_target::transpose_groups(q.data() + b * 64, cols, out->q.data() + tile);
      amx_target::transpose_groups(r.data() + b * 64, cols, out->r.data() + tile);
      for (int64_t m = 0; m < 16; ++m) {
        out->sum[static_cast<size_t>(v + m)] = sum[static_cast<size_t>(m * nb + b)];
        out->dv[static_cast<size_t>(v + m)] = d[static_cast<size_t>(m * nb + b)] / 256.0f;
      }
    }
    t = end;
  }
}

bool amx_available() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    // Highway's AVX3 check: AVX-512 F/VL/DQ/BW with the OS saving their state (XCR0), as the
    // AVX-512 instructions of amx_target need; CPUID bits alone do not say the OS enabled them.
    const bool avx512 = (hwy::SupportedTargets() & HWY_AVX3) != 0;
    const bool amx = ((d >> 24) & 1) && ((d >> 25) & 1);  // AMX-TILE, AMX-INT8
    const bool bmi2 = (b >> 8) & 1;                       // pdep (unpack_narrow)
    if (!avx512 || !amx || !bmi2) return false;
    // Linux hands out the 8 KiB tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA).
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return ok;
}

void packed_matmul_amx(const PackedMatrix& w, const ActTiles& xt, float* y, int64_t ldy, int64_t r0,
                       int64_t r1) {
  if (r0 < r1 && xt.n > 0) amx_target::amx_rows(w, xt, y, ldy, r0, r1);
}

#else  // no AMX in this build

void quantize_act_tiles(const float* x, int64_t t0, int64_t t1, ActTiles* out) {
  quantize_tiles_with(x, t0, t1, out);
}

bool amx_available() { return false; }

void packed_matmul_amx(const PackedMatrix&, const ActTiles&, float*, int64_t, int64_t, int64_t) {}

#endif

}  // namespace tq
