// f32 -> f16/bf16 -> f32 rounding exactly as MLX's CPU casts do, shared by the MLX decoders and
// encoders. Branch-free so per-element loops vectorize.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace tq {

// f32 rounded to bf16 as MLX does it (round to nearest even; every NaN becomes 0x7FC0),
// widened back to f32. Same as f32_to_bf16 but branch-free so loops vectorize.
inline float round_bf16_mlx(float x) {
  uint32_t u = f32_to_bits(x);
  uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1)) & 0xFFFF0000u;
  return bits_to_f32((u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : r);
}

// f32 rounded to f16 as MLX's CPU float16 does it (RNE, overflow to inf; NaN keeps only its
// sign: 0x7D00), widened back to f32. Equals f16_to_f32(f32_to_f16(x)) for non-NaN x.
inline float round_f16_mlx(float x) {
  uint32_t u = f32_to_bits(x), sign = u & 0x80000000u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return bits_to_f32(sign | 0x7FA00000u);   // f16 0x7D00 widened
  if (a >= 0x477FF000u) return bits_to_f32(sign | 0x7F800000u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {  // f16 subnormal range: the f32 add rounds to the 2^-24 grid of 0.5f
    float r = (bits_to_f32(a) + 0.5f) - 0.5f;
    return bits_to_f32(sign | f32_to_bits(r));
  }
  return bits_to_f32(sign | ((a + 0xFFFu + ((a >> 13) & 1)) & 0xFFFFE000u));  // 11-bit RNE
}

// x rounded to t (F32: unchanged; F16, BF16 as above). Other dtypes: unchanged.
inline float round_to_dtype(float x, DType t) {
  if (t == DType::kBF16) return round_bf16_mlx(x);
  if (t == DType::kF16) return round_f16_mlx(x);
  return x;
}

}  // namespace tq
