#include "tensor/tensor.h"

#include <cassert>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tq {

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

void convert_to_f32(DType src, std::span<const uint8_t> bytes, std::span<float> out) {
  const size_t n = out.size();
  switch (src) {
    case DType::kF32:
      assert(bytes.size() >= n * 4);
      std::memcpy(out.data(), bytes.data(), n * 4);
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) out[i] = load_f16(bytes.data() + 2 * i);
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) out[i] = load_bf16(bytes.data() + 2 * i);
      return;
    case DType::kF64:
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, bytes.data() + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      return;
    default:
      assert(false && "convert_to_f32: not a float dtype");
  }
}

std::vector<uint8_t> encode_from_f32(std::span<const float> in, DType dst) {
  std::vector<uint8_t> out(in.size() * dtype_size(dst));
  switch (dst) {
    case DType::kF32:
      std::memcpy(out.data(), in.data(), in.size() * 4);
      break;
    case DType::kF16:
      for (size_t i = 0; i < in.size(); ++i) {
        uint16_t h = f32_to_f16(in[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case DType::kBF16:
      for (size_t i = 0; i < in.size(); ++i) {
        uint16_t h = f32_to_bf16(in[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    default:
      assert(false && "encode_from_f32: unsupported dtype");
  }
  return out;
}

}  // namespace tq
