// Element types of stored tensors (safetensors names) and scalar conversions to f32.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tq {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// Safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
// config.json's torch_dtype for a float weight dtype: "bfloat16", "float16", else "float32".
std::string_view dtype_torch_name(DType t);
size_t dtype_size(DType t);
bool dtype_is_float(DType t);  // f16/bf16/f32/f64 (not the 8-bit scale types)

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }
// Round to nearest even; NaN stays NaN.
uint16_t f32_to_bf16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf

// One stored element at any alignment, widened to f32: every scalar read of f32/f16/bf16 data.
inline float load_f32(const void* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
inline float load_f16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
inline float load_bf16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bf16_to_f32(h);
}
// An element of dtype t: F32, F16, else BF16 (the float weight and scale dtypes).
inline float load_float(DType t, const void* p) {
  return t == DType::kF32 ? load_f32(p) : t == DType::kF16 ? load_f16(p) : load_bf16(p);
}

}  // namespace tq
