#include "formats/ggml_to_mlx.h"

#include <array>

#include "formats/ggml_blocks.h"
#include "formats/mlx_encode.h"

namespace tq {
namespace {

struct Layout {
  QuantSpec spec;
  int block_bytes;
  int scale_off, min_off, qh_off, qs_off;  // -1: absent
  int zero;                                // affine without min: bias = -zero * d
};

std::optional<Layout> layout_of(uint32_t t) {
  switch (static_cast<GgmlType>(t)) {
    case GgmlType::kQ4_0:
      return Layout{{QuantMode::kAffine, 4, 32}, 18, 0, -1, -1, 2, 8};
    case GgmlType::kQ4_1:
      return Layout{{QuantMode::kAffine, 4, 32}, 20, 0, 2, -1, 4, 0};
    case GgmlType::kQ5_0:
      return Layout{{QuantMode::kAffine, 5, 32}, 22, 0, -1, 2, 6, 16};
    case GgmlType::kQ5_1:
      return Layout{{QuantMode::kAffine, 5, 32}, 24, 0, 2, 4, 8, 0};
    case GgmlType::kQ8_0:
      return Layout{{QuantMode::kAffine, 8, 32}, 34, 0, -1, -1, 2, 128};
    case GgmlType::kMXFP4:
      return Layout{{QuantMode::kMxfp4, 4, 32}, 17, 0, -1, -1, 1, 0};
    default:
      return std::nullopt;
  }
}

void put_u16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v & 0xFF));
  out.push_back(static_cast<uint8_t>(v >> 8));
}

}  // namespace

std::optional<QuantSpec> ggml_mlx_spec(uint32_t ggml_type) {
  auto l = layout_of(ggml_type);
  if (!l) return std::nullopt;
  return l->spec;
}

Result<MlxQuantBytes> ggml_to_mlx(uint32_t ggml_type, std::span<const uint8_t> src, int64_t rows,
                                  int64_t cols) {
  auto l = layout_of(ggml_type);
  if (!l) return err("ggml type {} has no exact MLX form", ggml_type);
  if (rows < 0 || cols <= 0 || cols % 32 != 0)
    return err("{} x {} is not whole blocks of 32", rows, cols);
  const int64_t blocks = rows * (cols / 32);
  if (static_cast<int64_t>(src.size()) != blocks * l->block_bytes)
    return err("{} bytes of blocks, expected {}", src.size(), blocks * l->block_bytes);
  MlxQuantBytes out;
  out.spec = l->spec;
  const bool fp = l->spec.mode == QuantMode::kMxfp4;
  out.scale_dtype = fp ? DType::kU8 : DType::kF16;
  out.scales.reserve(static_cast<size_t>(blocks) * (fp ? 1 : 2));
  if (!fp) out.biases.reserve(static_cast<size_t>(blocks) * 2);
  std::vector<uint8_t> codes(static_cast<size_t>(cols));
  out.weight.reserve(static_cast<size_t>(rows * cols * l->spec.bits / 8));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols / 32; ++g) {
      const uint8_t* b = src.data() + (r * (cols / 32) + g) * l->block_bytes;
      uint8_t* c = codes.data() + g * 32;
      const uint8_t* qs = b + l->qs_off;
      if (l->spec.bits == 8) {
        for (int j = 0; j < 32; ++j) c[j] = static_cast<uint8_t>(static_cast<int8_t>(qs[j]) + 128);
      } else {
        for (int j = 0; j < 16; ++j) {
          c[j] = qs[j] & 0xF;
          c[j + 16] = qs[j] >> 4;
        }
        if (l->qh_off >= 0)
          for (int j = 0; j < 32; ++j)
            c[j] |= static_cast<uint8_t>(((b[l->qh_off + j / 8] >> (j % 8)) & 1) << 4);
      }
      if (fp) {  // E8M0 as MLX stores it; 255 is 2^127 to ggml but infinity to MLX
        if (b[l->scale_off] == 255) return err("row {}: an MXFP4 block with exponent 255", r);
        out.scales.push_back(b[l->scale_off]);
        continue;
      }
      out.scales.push_back(b[l->scale_off]);  // d: the f16 bits as stored
      out.scales.push_back(b[l->scale_off + 1]);
      if (l->min_off >= 0) {
        out.biases.push_back(b[l->min_off]);
        out.biases.push_back(b[l->min_off + 1]);
      } else {
        // d * (q - z) = d*q + (-z*d); -z*d is exact in f16 (z a power of two) unless it
        // overflows.
        const float bias = -static_cast<float>(l->zero) * load_f16(b + l->scale_off);
        const uint16_t h = f32_to_f16(bias);
        if (load_f16(&h) != bias)
          return err("row {}: bias {} of a {} block does not fit f16", r, bias,
                     quant_spec_str(l->spec));
        put_u16(out.biases, h);
      }
    }
    std::vector<uint8_t> packed = pack_codes(codes, l->spec.bits);
    out.weight.insert(out.weight.end(), packed.begin(), packed.end());
  }
  return out;
}

}  // namespace tq
