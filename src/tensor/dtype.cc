#include "tensor/dtype.h"

#include <array>
#include <cmath>

namespace tq {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 16> kDTypes = {{
    {DType::kBool, "BOOL", 1},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},
    {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},
}};
}  // namespace

std::string_view dtype_name(DType t) { return kDTypes[static_cast<size_t>(t)].name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}

std::string_view dtype_torch_name(DType t) {
  return t == DType::kBF16 ? "bfloat16" : t == DType::kF16 ? "float16" : "float32";
}

size_t dtype_size(DType t) { return kDTypes[static_cast<size_t>(t)].size; }

bool dtype_is_float(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64;
}

uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400) == 0);
      out = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3FF) << 13;
    }
  } else if (exp == 31) {
    out = sign | 0x7F800000u | (mant << 13);
  } else {
    out = sign | (exp + 127 - 15) << 23 | (mant << 13);
  }
  return bits_to_f32(out);
}

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_to_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t abs = u & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return sign | (abs > 0x7F800000 ? 0x7E00 : 0x7C00);
  if (abs >= 0x477FF000) return sign | 0x7C00;  // rounds to >= 65520: inf
  if (abs < 0x38800000) {                       // below 2^-14: subnormal or zero
    if (abs < 0x33000000) return sign;          // below half the smallest subnormal
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7FFFFF) | 0x800000;
    uint32_t shift = 126 - e;  // value = m * 2^(e-150); f16 subnormal unit is 2^-24
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t r = abs + 0xFFF + ((abs >> 13) & 1) - (112u << 23);
  return sign | static_cast<uint16_t>(r >> 13);
}

}  // namespace tq
