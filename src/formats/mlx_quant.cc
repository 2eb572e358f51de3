#include "formats/mlx_quant.h"

#include <array>
#include <bit>
#include <cstring>

#include "formats/mlx_float.h"

namespace tq {

namespace {

constexpr std::array<float, 16> kE2M1 = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// E4M3 "fn": bias 7, no infinities. MLX's CPU path widens through f16, so NaN arrives as the
// f16 NaN 0x7F80 widened to f32 (0x7FF00000).
constexpr float e4m3_value(uint8_t code) {
  uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  uint32_t e = (code >> 3) & 0xF;
  uint32_t m = code & 0x7;
  if (e == 0xF && m == 0x7) return std::bit_cast<float>(sign | 0x7FF00000u);
  if (e == 0) {
    float v = static_cast<float>(m) / 512.0f;  // m * 2^-9
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | (e + 120) << 23 | m << 20);
}

constexpr std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = e4m3_value(static_cast<uint8_t>(i));
  return t;
}
constexpr std::array<float, 256> kE4M3 = make_e4m3_table();

// Checked a*b for non-negative sizes; false on overflow.
bool mul_size(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// s*q rounded to f32 before the bias is added, as MLX's CPU path does. The empty asm makes
// the product opaque so no compiler flag (-ffp-contract=fast, -march=native) can fuse it
// with the add into an FMA, which would change the last bit.
inline float mul_f32(float a, float b) {
  float p = a * b;
#if defined(__x86_64__) || defined(__i386__)
  asm("" : "+x"(p));
#elif defined(__aarch64__)
  asm("" : "+w"(p));
#else
  volatile float v = p;
  p = v;
#endif
  return p;
}

// ŵ = s*q + b in the scales dtype T, rounded as MLX does: round(round(s*q) + b).
template <DType T>
inline float affine_value(float s, float q, float b) {
  if constexpr (T == DType::kF32) {
    return mul_f32(s, q) + b;
  } else if constexpr (T == DType::kBF16) {
    return round_bf16_mlx(round_bf16_mlx(s * q) + b);  // s*q is exact in f32
  } else {
    return round_f16_mlx(round_f16_mlx(s * q) + b);
  }
}

// One group of n codes. With fewer distinct codes than elements, a table of the 2^bits
// possible values is cheaper than rounding every element.
template <DType T>
void affine_group(const uint8_t* codes, int n, int bits, float s, float b, float* out) {
  const int levels = 1 << bits;
  if (levels <= 64 && levels < n) {
    float lut[64];
    for (int q = 0; q < levels; ++q) lut[q] = affine_value<T>(s, static_cast<float>(q), b);
    for (int i = 0; i < n; ++i) out[i] = lut[codes[i]];
    return;
  }
  for (int i = 0; i < n; ++i) out[i] = affine_value<T>(s, static_cast<float>(codes[i]), b);
}

bool scale_dtype_ok(QuantMode mode, DType t) {
  switch (mode) {
    case QuantMode::kAffine:
      return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
    case QuantMode::kNvfp4:
      return t == DType::kU8 || t == DType::kF8E4M3;
    default:
      return t == DType::kU8 || t == DType::kF8E8M0;
  }
}

}  // namespace

uint32_t unpack_code(const uint8_t* row, int64_t i, int bits) {
  uint64_t bit = static_cast<uint64_t>(i) * static_cast<uint64_t>(bits);
  const uint8_t* p = row + bit / 8;
  int shift = static_cast<int>(bit % 8);
  uint32_t v = p[0] >> shift;
  if (shift + bits > 8) v |= static_cast<uint32_t>(p[1]) << (8 - shift);  // straddles a byte
  return v & ((1u << bits) - 1);
}

// Codes [first, first + n) of a packed row as bytes (n a multiple of 8).
void unpack_codes(const uint8_t* row, int64_t first, int64_t n, int bits, uint8_t* codes) {
  if (bits == 8) {
    std::memcpy(codes, row + first, static_cast<size_t>(n));
  } else if (bits == 4) {
    const uint8_t* p = row + first / 2;
    for (int64_t i = 0; i < n / 2; ++i) codes[2 * i] = p[i] & 0xF, codes[2 * i + 1] = p[i] >> 4;
  } else if (bits == 2) {
    const uint8_t* p = row + first / 4;
    for (int64_t i = 0; i < n / 4; ++i)
      for (int j = 0; j < 4; ++j) codes[4 * i + j] = (p[i] >> (2 * j)) & 3;
  } else if (bits == 3 || bits == 5 || bits == 6) {
    // 8 codes fill `bits` whole bytes; read them as one little-endian word.
    const uint8_t* p = row + first * bits / 8;
    const uint64_t m = (1u << bits) - 1;
    // One 8-byte load where it stays within the n codes' bytes (copying `bits` bytes into the
    // word stalled on store forwarding); the extra bytes are shifted out below.
    const int64_t groups = n / 8;
    for (int64_t i = 0; i < groups; ++i) {
      uint64_t v = 0;
      std::memcpy(&v, p + i * bits, i * bits + 8 <= groups * bits ? 8 : static_cast<size_t>(bits));
      for (int j = 0; j < 8; ++j) codes[8 * i + j] = static_cast<uint8_t>((v >> (bits * j)) & m);
    }
  } else {
    for (int64_t i = 0; i < n; ++i)
      codes[i] = static_cast<uint8_t>(unpack_code(row, first + i, bits));
  }
}

float e2m1_to_f32(uint8_t code) { return kE2M1[code & 0xF]; }

float e4m3_to_f32(uint8_t code) { return kE4M3[code]; }

float e8m0_to_f32(uint8_t code) {
  // E<<23 is 2^(E-127) as an f32 bit pattern (E=255 gives +inf); E=0 is the subnormal 2^-127.
  return bits_to_f32(code == 0 ? 0x00400000u : static_cast<uint32_t>(code) << 23);
}

float affine_dequant_value(float s, uint32_t q, float b, DType scale_dtype) {
  const float qf = static_cast<float>(q);
  if (scale_dtype == DType::kBF16) return affine_value<DType::kBF16>(s, qf, b);
  if (scale_dtype == DType::kF16) return affine_value<DType::kF16>(s, qf, b);
  return affine_value<DType::kF32>(s, qf, b);
}

Status dequantize_mlx(const QuantSpec& spec, int64_t rows, int64_t cols,
                      std::span<const uint8_t> weight, DType scale_dtype,
                      std::span<const uint8_t> scales, std::span<const uint8_t> biases,
                      std::span<float> out) {
  if (Status st = validate_quant_spec(spec); !st.ok()) return st;
  const std::string what = quant_spec_str(spec);
  if (rows < 0 || cols < 0) return err("{}: negative shape [{}, {}]", what, rows, cols);
  if (cols % spec.group_size != 0)
    return err("{}: {} columns is not a multiple of the group size {}", what, cols,
               spec.group_size);
  if ((cols % 32) * spec.bits % 32 != 0)  // cols*bits mod 32, without overflow
    return err("{}: {} columns of {} bits do not fill whole uint32 words", what, cols, spec.bits);
  if (!scale_dtype_ok(spec.mode, scale_dtype))
    return err("{}: scales have unsupported dtype {}", what, dtype_name(scale_dtype));

  int64_t n = 0, weight_bytes = 0, n_scales = 0, scale_bytes = 0;
  const int64_t groups = cols / spec.group_size;
  const int64_t row_bytes = cols / 8 * spec.bits;  // cols is a multiple of 16 here
  if (!mul_size(rows, cols, &n) || !mul_size(rows, row_bytes, &weight_bytes) ||
      !mul_size(rows, groups, &n_scales) ||
      !mul_size(n_scales, static_cast<int64_t>(dtype_size(scale_dtype)), &scale_bytes))
    return err("{}: shape [{}, {}] is too large", what, rows, cols);
  if (static_cast<int64_t>(weight.size()) != weight_bytes)
    return err("{}: weight has {} bytes, expected {} for shape [{}, {}]", what, weight.size(),
               weight_bytes, rows, cols);
  if (static_cast<int64_t>(scales.size()) != scale_bytes)
    return err("{}: scales have {} bytes, expected {} ([{}, {}] of {})", what, scales.size(),
               scale_bytes, rows, groups, dtype_name(scale_dtype));
  const bool has_biases = quant_mode_has_biases(spec.mode);
  if (has_biases && static_cast<int64_t>(biases.size()) != scale_bytes)
    return err("{}: biases have {} bytes, expected {}", what, biases.size(), scale_bytes);
  if (!has_biases && !biases.empty())
    return err("{}: mode has no biases but some were given", what);
  if (static_cast<int64_t>(out.size()) != n)
    return err("{}: output holds {} values, expected {}", what, out.size(), n);

  const int g = spec.group_size;
  const size_t ssize = dtype_size(scale_dtype);
  uint8_t codes[128];
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = weight.data() + r * row_bytes;
    for (int64_t j = 0; j < groups; ++j) {
      const int64_t idx = r * groups + j;
      float* o = out.data() + r * cols + j * g;
      unpack_codes(row, j * g, g, spec.bits, codes);
      if (has_biases) {
        float s = load_float(scale_dtype, scales.data() + idx * ssize);
        float b = load_float(scale_dtype, biases.data() + idx * ssize);
        if (scale_dtype == DType::kF32) {
          affine_group<DType::kF32>(codes, g, spec.bits, s, b, o);
        } else if (scale_dtype == DType::kBF16) {
          affine_group<DType::kBF16>(codes, g, spec.bits, s, b, o);
        } else {
          affine_group<DType::kF16>(codes, g, spec.bits, s, b, o);
        }
        continue;
      }
      // fp modes: scale*element is exact in f32; mx.dequantize rounds it once to bf16.
      uint8_t sb = scales[idx];
      float s = spec.mode == QuantMode::kNvfp4 ? e4m3_to_f32(sb) : e8m0_to_f32(sb);
      if (spec.bits == 4) {
        for (int i = 0; i < g; ++i) o[i] = round_bf16_mlx(s * kE2M1[codes[i]]);
      } else {
        for (int i = 0; i < g; ++i) o[i] = round_bf16_mlx(s * kE4M3[codes[i]]);
      }
    }
  }
  return ok_status();
}

}  // namespace tq
