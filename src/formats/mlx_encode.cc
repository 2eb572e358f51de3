// MLX encoders. The arithmetic copies what mx.quantize (mlx 0.32.4) does on the CPU, operation
// by operation, as established against it by tests/oracle/test_mlx_quantize.py:
// - affine runs the fast::Quantize CPU kernel: stats, scale, bias and codes in f32 on the
//   widened input; codes use the f32 (unrounded) scale and bias, which are then cast to the
//   input dtype. 1-bit is scale = max(w_max - w_min, eps), bias = w_min.
// - fp modes run an op graph whose ops round to the input dtype: s = amax/maxval in dtype;
//   mx modes E = ceil(log2 s) (older MLX rounded to nearest); elements x = w/2^E in dtype;
//   E2M1 by argmin of |x - v| over the table (ties to the lower index); nvfp4 scale = ToFP8(s).
// No expression here is a product feeding a sum, so FMA contraction cannot change a result.
#include "formats/mlx_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/mlx_float.h"
#include "formats/mlx_quant.h"

namespace tq {

namespace {

bool mul_size(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// rint for v in [0, 2^23): adding 2^23 leaves an integer-valued float (round to nearest even).
inline uint32_t rint_small(float v) { return static_cast<uint32_t>(v + 8388608.0f) - 8388608u; }

// f32_to_e4m3, inline for the per-element loops.
inline uint8_t e4m3_of(float x) {
  uint32_t u = f32_to_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  u &= 0x7FFFFFFFu;
  uint32_t mag;
  if (u >= 0x43E00000u) {  // >= 448, inf, NaN
    mag = 0x7E;
  } else if (u < 0x3C800000u) {  // below 2^-6: subnormal m * 2^-9; adding 2^14 rounds to that grid
    mag = f32_to_bits(bits_to_f32(u) + 16384.0f) - 0x46800000u;
  } else {  // rebias the exponent (127 -> 7) and round 23 mantissa bits to 3, ties to even
    mag = (u - (120u << 23) + 0x7FFFFu + ((u >> 20) & 1)) >> 20;
  }
  return static_cast<uint8_t>(sign | mag);
}

// The fp scale of a group from its largest magnitude (see fp_group_scale).
FpGroupScale fp_scale_of_amax(QuantMode mode, float amax, DType dtype) {
  const float s = round_to_dtype(amax / (mode == QuantMode::kMxfp8 ? 448.0f : 6.0f), dtype);
  if (mode == QuantMode::kNvfp4) {
    const uint8_t byte = f32_to_e4m3(s);
    return {byte, round_to_dtype(e4m3_to_f32(byte), dtype)};
  }
  // E = ceil(log2(s)), exactly (MLX rounds log2 and then corrects it against 2^E); 0 for s = 0.
  int e = 0;
  if (s > 0.0f) {
    int ex = 0;
    const float m = std::frexp(s, &ex);  // s = m * 2^ex, m in [0.5, 1)
    e = m == 0.5f ? ex - 1 : ex;
  }
  // 2^e is a value of dtype: s >= its smallest subnormal, and s <= max/6.
  return {static_cast<uint8_t>((e + 127) & 0xFF), std::ldexp(1.0f, e)};
}

constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// MLX's E2M1 encoding: argmin over the table of |x - v| computed in dist_dtype, first index on
// ties. Non-finite x makes every distance inf or NaN and leaves index 0.
uint8_t e2m1_code_argmin(float x, DType dist_dtype) {
  uint8_t best = 0;
  float best_d = std::fabs(round_to_dtype(x - kE2M1[0], dist_dtype));
  for (uint8_t k = 1; k < 16; ++k) {
    const float d = std::fabs(round_to_dtype(x - kE2M1[k], dist_dtype));
    if (d < best_d) {
      best = k;
      best_d = d;
    }
  }
  return best;
}

// Same result, fast: for |x| <= 8 the distances to the two neighbouring table values are exact
// (Sterbenz), so the argmin is the nearest magnitude with ties to the lower index (the smaller
// magnitude), and -0 (index 8) always loses to +0. Larger x, where rounded distances collapse
// into ties, takes the table scan.
inline uint8_t e2m1_code_mlx(float x, DType dist_dtype) {
  const float a = std::fabs(x);
  if (!(a <= 8.0f)) return e2m1_code_argmin(x, dist_dtype);
  uint8_t m =
      (a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) + (a > 3.5f) + (a > 5.0f);
  return m == 0 ? 0 : static_cast<uint8_t>(m | (std::signbit(x) ? 0x8 : 0));
}

// Packs n codes (n*bits a multiple of 8) into n*bits/8 bytes of the little-endian bitstream.
void pack_into(const uint8_t* c, int64_t n, int bits, uint8_t* out) {
  switch (bits) {
    case 8:
      std::memcpy(out, c, static_cast<size_t>(n));
      return;
    case 4:
      for (int64_t i = 0; i < n / 2; ++i)
        out[i] = static_cast<uint8_t>(c[2 * i] | c[2 * i + 1] << 4);
      return;
    case 2:
      for (int64_t i = 0; i < n / 4; ++i)
        out[i] = static_cast<uint8_t>(c[4 * i] | c[4 * i + 1] << 2 | c[4 * i + 2] << 4 |
                                      c[4 * i + 3] << 6);
      return;
    default: {  // 1, 3, 5, 6, 7: accumulate LSB first and flush whole bytes
      uint64_t acc = 0;
      int have = 0;
      for (int64_t i = 0; i < n; ++i) {
        acc |= static_cast<uint64_t>(c[i]) << have;
        have += bits;
        while (have >= 8) {
          *out++ = static_cast<uint8_t>(acc);
          acc >>= 8;
          have -= 8;
        }
      }
    }
  }
}

void store_scalar(float v, DType t, uint8_t* p) {
  if (t == DType::kF32) {
    std::memcpy(p, &v, 4);
    return;
  }
  uint16_t h = t == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// The grid from the group's min and max, in f32 as MLX's CPU kernel computes it.
AffineGrid affine_grid_of_range(float lo, float hi, int bits, DType dtype) {
  const float n_bins = static_cast<float>((1 << bits) - 1), eps = 1e-7f;
  float scale, bias;
  if (bits == 1) {  // MLX's 1-bit rule: code 0 -> w_min, code 1 -> w_max
    scale = std::max(hi - lo, eps);
    bias = lo;
  } else {
    // The larger-magnitude end becomes the bias (q = 0), so the scale is negative when it is
    // w_max; re-fitting the scale through it makes 0.0 land exactly on code -q0.
    scale = std::max((hi - lo) / n_bins, eps);
    const bool min_is_edge = std::fabs(lo) > std::fabs(hi);
    if (!min_is_edge) scale = -scale;
    const float edge = min_is_edge ? lo : hi;
    const float q0 = std::rint(edge / scale);
    bias = 0.0f;
    if (q0 != 0.0f) {
      scale = edge / q0;
      bias = edge;
    }
  }
  return {scale, bias, round_to_dtype(scale, dtype), round_to_dtype(bias, dtype)};
}

// Min and max of n finite values (n a multiple of 8) in 8 independent lanes so the loop
// vectorizes; only the sign of a zero result can depend on the order (see affine_rows).
inline void min_max(const float* x, int n, float* lo, float* hi) {
  float l[8], h[8];
  for (int k = 0; k < 8; ++k) l[k] = h[k] = x[k];
  for (int i = 8; i < n; i += 8)
    for (int k = 0; k < 8; ++k) {
      l[k] = x[i + k] < l[k] ? x[i + k] : l[k];
      h[k] = x[i + k] > h[k] ? x[i + k] : h[k];
    }
  *lo = l[0];
  *hi = h[0];
  for (int k = 1; k < 8; ++k) {
    *lo = l[k] < *lo ? l[k] : *lo;
    *hi = h[k] > *hi ? h[k] : *hi;
  }
}

// affine_code over one group of G values; G is a constant so the loop vectorizes.
template <int G>
void affine_codes(const float* x, float s, float b, float n_bins, uint8_t* codes) {
  for (int i = 0; i < G; ++i) {
    float v = (x[i] - b) / s;
    v = v > 0.0f ? v : 0.0f;
    v = v < n_bins ? v : n_bins;
    codes[i] = static_cast<uint8_t>(static_cast<int32_t>(v + 8388608.0f) - 8388608);
  }
}

// Affine rows: one group at a time, codes into a small buffer, then packed.
template <int G>
void affine_rows(int bits, int64_t rows, int64_t cols, const float* w, DType dtype, uint8_t* weight,
                 uint8_t* scales, uint8_t* biases) {
  const int64_t groups = cols / G, row_bytes = cols / 8 * bits;
  const size_t ssize = dtype_size(dtype);
  const float n_bins = static_cast<float>((1 << bits) - 1);
  uint8_t codes[G];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < groups; ++j) {
      const float* x = w + r * cols + j * G;
      float lo, hi;
      min_max(x, G, &lo, &hi);
      // MLX scans in order with std::min, so a zero minimum keeps the sign of the first zero;
      // only the 1-bit bias (= w_min) can show it.
      if (bits == 1 && lo == 0.0f) lo = *std::find(x, x + G, 0.0f);
      const AffineGrid grid = affine_grid_of_range(lo, hi, bits, dtype);
      affine_codes<G>(x, grid.scale, grid.bias, n_bins, codes);
      pack_into(codes, G, bits, weight + r * row_bytes + j * G * bits / 8);
      const int64_t idx = r * groups + j;
      store_scalar(grid.stored_scale, dtype, scales + idx * ssize);
      store_scalar(grid.stored_bias, dtype, biases + idx * ssize);
    }
  }
}

void quantize_affine(const QuantSpec& spec, int64_t rows, int64_t cols, const float* w, DType dtype,
                     uint8_t* weight, uint8_t* scales, uint8_t* biases) {
  switch (spec.group_size) {
    case 32:
      return affine_rows<32>(spec.bits, rows, cols, w, dtype, weight, scales, biases);
    case 64:
      return affine_rows<64>(spec.bits, rows, cols, w, dtype, weight, scales, biases);
    default:
      return affine_rows<128>(spec.bits, rows, cols, w, dtype, weight, scales, biases);
  }
}

// round_to_dtype for finite |x| < 65504, without the NaN and overflow cases and branch-free, so
// the per-element loops vectorize.
template <DType T>
inline float round_finite(float x) {
  const uint32_t u = f32_to_bits(x);
  if constexpr (T == DType::kBF16) {
    return bits_to_f32((u + 0x7FFFu + ((u >> 16) & 1)) & 0xFFFF0000u);
  } else if constexpr (T == DType::kF16) {
    const uint32_t a = u & 0x7FFFFFFFu;
    const uint32_t normal = (a + 0xFFFu + ((a >> 13) & 1)) & 0xFFFFE000u;
    const uint32_t sub = f32_to_bits((bits_to_f32(a) + 0.5f) - 0.5f);  // 2^-24 grid
    return bits_to_f32((u & 0x80000000u) | (a < 0x38800000u ? sub : normal));
  }
  return x;
}

// fp rows for dtype T and group size G: a vectorizable pass per group when every element
// lands in the exact E2M1 zone (|x| <= 8) or is E4M3-coded, otherwise fp_code per element.
template <DType T, int G>
void fp_rows(QuantMode mode, int64_t rows, int64_t cols, const float* w, uint8_t* weight,
             uint8_t* scales) {
  const int bits = mode == QuantMode::kMxfp8 ? 8 : 4;
  const int64_t groups = cols / G, row_bytes = cols / 8 * bits;
  uint8_t codes[G];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < groups; ++j) {
      const float* x = w + r * cols + j * G;
      float amax = 0.0f;
      for (int i = 0; i < G; ++i) amax = std::max(amax, std::fabs(x[i]));
      const FpGroupScale sc = fp_scale_of_amax(mode, amax, T);
      const float d = sc.divisor;
      if (mode == QuantMode::kMxfp8) {
        // |x/d| < 1.5 * 448 (2^E >= amax/448 up to a subnormal rounding of amax/448 to T)
        for (int i = 0; i < G; ++i) codes[i] = e4m3_of(round_finite<T>(x[i] / d));
      } else if (d > 0.0f && round_to_dtype(amax / d, T) <= 8.0f) {  // monotone: all |x/d| <= 8
        for (int i = 0; i < G; ++i) {
          const float v = round_finite<T>(x[i] / d), a = std::fabs(v);
          const uint32_t m = (a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) +
                             (a > 3.5f) + (a > 5.0f);
          codes[i] = static_cast<uint8_t>(m == 0 ? 0 : m | ((f32_to_bits(v) >> 28) & 8));
        }
      } else {
        for (int i = 0; i < G; ++i) codes[i] = fp_code(mode, x[i], d, T);
      }
      pack_into(codes, G, bits, weight + r * row_bytes + j * G * bits / 8);
      scales[r * groups + j] = sc.byte;
    }
  }
}

template <DType T>
void quantize_fp_typed(QuantMode mode, int64_t rows, int64_t cols, const float* w, uint8_t* weight,
                       uint8_t* scales) {
  if (mode == QuantMode::kNvfp4) return fp_rows<T, 16>(mode, rows, cols, w, weight, scales);
  return fp_rows<T, 32>(mode, rows, cols, w, weight, scales);
}

void quantize_fp(const QuantSpec& spec, int64_t rows, int64_t cols, const float* w, DType dtype,
                 uint8_t* weight, uint8_t* scales) {
  if (dtype == DType::kBF16)
    return quantize_fp_typed<DType::kBF16>(spec.mode, rows, cols, w, weight, scales);
  if (dtype == DType::kF16)
    return quantize_fp_typed<DType::kF16>(spec.mode, rows, cols, w, weight, scales);
  return quantize_fp_typed<DType::kF32>(spec.mode, rows, cols, w, weight, scales);
}

// Whether v is non-finite or not a value of dtype T; branch-free so the scan vectorizes.
template <DType T>
inline bool bad_value(float v) {
  const uint32_t u = f32_to_bits(v);
  const bool nonfinite = (u & 0x7F800000u) == 0x7F800000u;
  if constexpr (T == DType::kBF16) return nonfinite | ((u & 0xFFFFu) != 0);
  if constexpr (T == DType::kF16) return nonfinite | (round_f16_mlx(v) != v);
  return nonfinite;
}

// Index of the first value that is non-finite or not a value of T; -1 if none. Scans blocks
// with an OR-reduction and looks for the index only in a bad block.
template <DType T>
int64_t first_bad_value(std::span<const float> w) {
  constexpr size_t kBlock = 1024;
  for (size_t start = 0; start < w.size(); start += kBlock) {
    const size_t end = std::min(w.size(), start + kBlock);
    uint32_t bad = 0;
    if (end - start == kBlock) {  // a constant trip count lets -O2 vectorize
      const float* p = w.data() + start;
      for (size_t i = 0; i < kBlock; ++i) bad |= static_cast<uint32_t>(bad_value<T>(p[i]));
    } else {
      for (size_t i = start; i < end; ++i) bad |= static_cast<uint32_t>(bad_value<T>(w[i]));
    }
    if (bad == 0) continue;
    for (size_t i = start; i < end; ++i)
      if (bad_value<T>(w[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t first_bad_value(std::span<const float> w, DType dtype) {
  if (dtype == DType::kBF16) return first_bad_value<DType::kBF16>(w);
  if (dtype == DType::kF16) return first_bad_value<DType::kF16>(w);
  return first_bad_value<DType::kF32>(w);
}

}  // namespace

AffineGrid affine_grid(std::span<const float> group, int bits, DType dtype) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (float x : group) {  // std::max/min in order, as MLX (this fixes the sign of a zero)
    hi = std::max(hi, x);
    lo = std::min(lo, x);
  }
  return affine_grid_of_range(lo, hi, bits, dtype);
}

uint32_t affine_code(float w, float scale, float bias, int bits) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  float v = (w - bias) / scale;
  v = v > 0.0f ? v : 0.0f;  // also maps NaN to 0
  v = v < n_bins ? v : n_bins;
  return rint_small(v);
}

FpGroupScale fp_group_scale(QuantMode mode, std::span<const float> group, DType dtype) {
  float amax = 0.0f;
  for (float x : group) amax = std::max(amax, std::fabs(x));
  return fp_scale_of_amax(mode, amax, dtype);
}

uint8_t fp_code(QuantMode mode, float w, float divisor, DType dtype) {
  if (divisor == 0.0f) return 0;  // MLX divides: inf/NaN quotients, whose E2M1 argmin is 0
  const float x = round_to_dtype(w / divisor, dtype);
  if (mode == QuantMode::kMxfp8) return f32_to_e4m3(x);
  // MLX's graph subtracts the table in dtype for mx modes but in f32 for nvfp4.
  return e2m1_code_mlx(x, mode == QuantMode::kNvfp4 ? DType::kF32 : dtype);
}

uint8_t f32_to_e4m3(float x) { return e4m3_of(x); }

std::vector<uint8_t> pack_codes(std::span<const uint8_t> codes, int bits) {
  if (bits < 1 || bits > 8) return {};
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  std::vector<uint8_t> out((codes.size() * static_cast<size_t>(bits) + 7) / 8, 0);
  for (size_t i = 0; i < codes.size(); ++i) {
    const size_t bit = i * static_cast<size_t>(bits);
    const uint32_t v = static_cast<uint32_t>(codes[i] & mask) << (bit % 8);
    out[bit / 8] |= static_cast<uint8_t>(v);
    if (v > 0xFF) out[bit / 8 + 1] |= static_cast<uint8_t>(v >> 8);  // straddles a byte
  }
  return out;
}

Status quantize_mlx(const QuantSpec& spec, int64_t rows, int64_t cols, std::span<const float> w,
                    DType dtype, std::vector<uint8_t>* weight, std::vector<uint8_t>* scales,
                    std::vector<uint8_t>* biases) {
  if (Status st = validate_quant_spec(spec); !st.ok()) return st;
  const std::string what = quant_spec_str(spec);
  if (weight == nullptr || scales == nullptr || biases == nullptr)
    return err("{}: missing output buffer", what);
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16)
    return err("{}: cannot quantize values of dtype {}", what, dtype_name(dtype));
  if (rows < 0 || cols < 0) return err("{}: negative shape [{}, {}]", what, rows, cols);
  if (cols % spec.group_size != 0)
    return err("{}: {} columns is not a multiple of the group size {}", what, cols,
               spec.group_size);
  int64_t n = 0, weight_bytes = 0, n_scales = 0;
  const int64_t groups = cols / spec.group_size;
  if (!mul_size(rows, cols, &n) || !mul_size(rows, cols / 8 * spec.bits, &weight_bytes) ||
      !mul_size(rows, groups, &n_scales))
    return err("{}: shape [{}, {}] is too large", what, rows, cols);
  if (static_cast<int64_t>(w.size()) != n)
    return err("{}: {} values given for shape [{}, {}]", what, w.size(), rows, cols);
  if (int64_t i = first_bad_value(w, dtype); i >= 0) {
    if (!std::isfinite(w[i]))
      return err("{}: weight [{}, {}] is {}", what, i / cols, i % cols, w[i]);
    return err("{}: weight [{}, {}] = {} is not a {} value (round the weights to {} first)", what,
               i / cols, i % cols, w[i], dtype_name(dtype), dtype_name(dtype));
  }

  const bool affine = spec.mode == QuantMode::kAffine;
  const size_t scale_size = affine ? dtype_size(dtype) : 1;
  weight->assign(static_cast<size_t>(weight_bytes), 0);
  scales->assign(static_cast<size_t>(n_scales) * scale_size, 0);
  if (affine) {
    biases->assign(static_cast<size_t>(n_scales) * scale_size, 0);
    quantize_affine(spec, rows, cols, w.data(), dtype, weight->data(), scales->data(),
                    biases->data());
  } else {
    biases->clear();
    quantize_fp(spec, rows, cols, w.data(), dtype, weight->data(), scales->data());
  }
  return ok_status();
}

}  // namespace tq
