// A weight matrix W[rows = out, cols = in] exactly as a checkpoint stores it (f32/f16/bf16, or
// MLX affine / mxfp4 / nvfp4 / mxfp8 packed codes with their scales), used in place by the
// packed kernels (kernels/packed_matmul.h). The bytes belong to someone else (usually an mmap).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "tensor/dtype.h"

namespace tq {

enum class WeightFormat : uint8_t { kF32, kF16, kBF16, kAffine, kMxfp4, kNvfp4, kMxfp8 };

struct PackedMatrix {
  WeightFormat format = WeightFormat::kF32;
  int bits = 32;                    // element width: 32/16 floats, 2..8 affine, 4/8 fp modes
  int group = 0;                    // quantization group (0 for float formats)
  DType scale_dtype = DType::kF32;  // affine: F32/F16/BF16; fp modes: U8 (E8M0 or E4M3 bytes)
  int64_t rows = 0, cols = 0;       // [out, in]
  const uint8_t* data = nullptr;    // rows * row_bytes() bytes, row-major
  const uint8_t* scales = nullptr;  // [rows, cols / group] of scale_dtype (quantized only)
  const uint8_t* biases = nullptr;  // [rows, cols / group] of scale_dtype (affine only)
  // The codes, scales and biases again in the lanes kernel's order (pack_lanes,
  // kernels/packed_matmul.h), or null: with them every batch size takes that kernel. Owned by
  // whoever set them (use_lanes).
  const uint8_t* lanes = nullptr;
  const uint8_t* lane_scales = nullptr;

  int64_t row_bytes() const { return cols * bits / 8; }
  int64_t groups() const { return group > 0 ? cols / group : 0; }
  bool quantized() const { return group > 0; }
  // Bytes one full product reads (data + scales + biases): the decode memory traffic.
  uint64_t bytes() const;
};

// Validated views; the spans must hold exactly the sizes the shape implies.
Result<PackedMatrix> make_float_matrix(DType dtype, int64_t rows, int64_t cols,
                                       std::span<const uint8_t> data);
Result<PackedMatrix> make_quant_matrix(const QuantSpec& spec, int64_t rows, int64_t cols,
                                       std::span<const uint8_t> weight, DType scale_dtype,
                                       std::span<const uint8_t> scales,
                                       std::span<const uint8_t> biases);

// "bf16", "affine 4-bit g64", "mxfp4", ... for logs and tests.
std::string weight_format_str(const PackedMatrix& w);

// Entry i of an affine scale or bias array of dtype t (F32, F16 or BF16), as f32.
inline float scale_at(DType t, const uint8_t* base, int64_t i) {
  return load_float(t, base + (t == DType::kF32 ? 4 : 2) * i);
}

// One weight of the matrix as the kernels compute with it (affine: s*q + b in f32; fp modes:
// scale * element; floats widened). The scalar decoding every kernel is tested against.
float packed_weight(const PackedMatrix& w, int64_t r, int64_t k);
// Row r decoded to f32 (cols values), through packed_weight.
void packed_decode_row_ref(const PackedMatrix& w, int64_t r, float* out);

}  // namespace tq
