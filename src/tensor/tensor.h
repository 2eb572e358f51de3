// A tensor is a shape plus bytes: borrowed from a mapping (TensorView) or owned (FloatTensor).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace tq {

using Shape = std::vector<int64_t>;

inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s);  // "[576, 1536]"

// Borrowed view of stored bytes (usually inside a MappedFile).
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::span<const uint8_t> bytes;
};

// Owned f32 tensor, row-major.
struct FloatTensor {
  Shape shape;
  std::vector<float> data;
};

// Converts f32/f16/bf16 (and f64) stored bytes to f32. Other dtypes are a caller error.
void convert_to_f32(DType src, std::span<const uint8_t> bytes, std::span<float> out);
// Encodes f32 as f32/f16/bf16 bytes (little endian).
std::vector<uint8_t> encode_from_f32(std::span<const float> in, DType dst);

}  // namespace tq
