// Encoders for MLX-quantized matrices (FORMATS.md §2-3): affine, mxfp4, nvfp4, mxfp8. The
// output equals mx.quantize on the CPU (mlx 0.32.4) bit for bit, for inputs of dtype F32, F16
// or BF16. The per-group functions are exposed so GPTQ can quantize on exactly the same grid.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "tensor/dtype.h"

namespace tq {

// The affine grid of one group as mx.quantize computes it, in f32 (FORMATS.md §2.2; 1-bit:
// scale = max(w_max - w_min, 1e-7), bias = w_min). MLX chooses the codes against the f32
// `scale`/`bias` and stores them rounded to the weight dtype (`stored_*`); the two pairs can
// differ in the last bits, and dequantization uses the stored pair.
struct AffineGrid {
  float scale = 0.0f;
  float bias = 0.0f;
  float stored_scale = 0.0f;
  float stored_bias = 0.0f;
};

// Grid of one non-empty group of finite values; bits 1..8; dtype F32, F16 or BF16.
AffineGrid affine_grid(std::span<const float> group, int bits, DType dtype);

// clamp(rint((w - bias) / scale), 0, 2^bits - 1) computed in f32 with ties to even, as MLX's
// CPU kernel does; NaN gives 0. Pass the grid's f32 pair to reproduce mx.quantize.
uint32_t affine_code(float w, float scale, float bias, int bits);

// Scale of one group in an fp mode: the stored byte (E8M0 or E4M3) and the value elements are
// divided by (2^(E-127) or the decoded E4M3, as a value of dtype). mx modes take
// E = ceil(log2(amax/maxval)), with amax/maxval rounded to dtype first; mlx 0.32.4 rounds up,
// not to nearest as older MLX did, and wraps E+127 to a byte below 2^-127.
struct FpGroupScale {
  uint8_t byte = 0;
  float divisor = 1.0f;
};
FpGroupScale fp_group_scale(QuantMode mode, std::span<const float> group, DType dtype);

// Code of w (E2M1 in the low 4 bits, or E4M3 for mxfp8) given its group's divisor: x = w /
// divisor rounded to dtype; E2M1 is MLX's argmin of |x - v| over its 16-entry table (first
// index on ties: the smaller magnitude, never -0; huge x collapse to ties), so non-finite x
// gives 0. A zero divisor (an nvfp4 scale that underflows to 0) gives 0 without dividing.
uint8_t fp_code(QuantMode mode, float w, float divisor, DType dtype);

// E4M3 ("fn") as MLX's ToFP8: round to nearest even, magnitudes >= 448 (and NaN) saturate to
// 0x7E with the sign.
uint8_t f32_to_e4m3(float x);

// Little-endian bitstream of `bits`-wide codes (bits 1..8; the inverse of unpack_code): code i
// occupies stream bits [i*bits, (i+1)*bits). Codes are masked to `bits`; the last byte is padded
// with zero bits.
std::vector<uint8_t> pack_codes(std::span<const uint8_t> codes, int bits);

// Quantizes w [rows, cols] (row-major, finite values of `dtype`: F32, F16 or BF16, widened to
// f32) as mx.quantize does for an array of that dtype:
//   weight: rows * (cols*bits/32) U32 words as little-endian bytes
//   scales: [rows, cols/group] of dtype (affine) or U8 (fp modes)
//   biases: [rows, cols/group] of dtype (affine); cleared for fp modes
// Errors: unsupported spec or dtype, cols not a multiple of the group, size mismatch, NaN/inf
// or a value that is not exactly representable in dtype.
Status quantize_mlx(const QuantSpec& spec, int64_t rows, int64_t cols, std::span<const float> w,
                    DType dtype, std::vector<uint8_t>* weight, std::vector<uint8_t>* scales,
                    std::vector<uint8_t>* biases);

}  // namespace tq
