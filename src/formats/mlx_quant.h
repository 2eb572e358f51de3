// Decoders for MLX-quantized matrices (FORMATS.md §2-3): affine, mxfp4, nvfp4, mxfp8.
// Encoders (quantize + pack) come with `tq convert`.
#pragma once

#include <cstdint>
#include <span>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "tensor/dtype.h"

namespace tq {

// Code i of a little-endian bitstream of `bits`-wide codes (bits 1..8, any width). The caller
// guarantees the bytes holding bits [i*bits, (i+1)*bits) exist.
uint32_t unpack_code(const uint8_t* row, int64_t i, int bits);

// Codes [first, first + n) of a packed row as bytes (n and first multiples of 8).
void unpack_codes(const uint8_t* row, int64_t first, int64_t n, int bits, uint8_t* codes);

float e2m1_to_f32(uint8_t code);  // low 4 bits used
// MLX CPU decoding (mlx 0.32): 0x7F/0xFF are NaN (the Metal kernels give +-480 instead);
// subnormals are m * 2^-9.
float e4m3_to_f32(uint8_t code);
float e8m0_to_f32(uint8_t code);  // 2^(E-127), E=0 -> 2^-127, E=255 -> +inf (as MLX)

// One affine weight s*q + b exactly as dequantize_mlx computes it (scale_dtype F32/F16/BF16;
// s and b already hold values of that dtype).
float affine_dequant_value(float s, uint32_t q, float b, DType scale_dtype);

// Dequantizes an MLX-quantized matrix [rows, cols] into `out` (rows*cols floats).
//   weight: U32 words, rows * (cols*bits/32) of them, as raw little-endian bytes
//   scales: [rows, cols/group] of scale_dtype (F32/F16/BF16 for affine; U8 for fp modes)
//   biases: [rows, cols/group] of scale_dtype (affine only; empty otherwise)
// The result equals mx.dequantize (default dtype) bit for bit, widened to f32: affine rounds
// s*q and then (s*q)+b to the scales dtype (two roundings, no FMA); fp modes compute
// scale*element in f32 and round it once to bf16, mx.dequantize's default output dtype.
// scale_dtype for fp modes: U8, or F8_E8M0 (mx modes) / F8_E4M3 (nvfp4).
Status dequantize_mlx(const QuantSpec& spec, int64_t rows, int64_t cols,
                      std::span<const uint8_t> weight, DType scale_dtype,
                      std::span<const uint8_t> scales, std::span<const uint8_t> biases,
                      std::span<float> out);

}  // namespace tq
