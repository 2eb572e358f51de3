// GGML tensor types as stored in GGUF files and their dequantization to f32.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/result.h"

namespace tq {

// Numeric ids as in the GGUF spec (ggml_type).
// clang-format off
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kIQ2_XXS = 16,
  kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22,
  kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30,
  kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39, kNVFP4 = 40, kQ1_0 = 41,
};
// clang-format on

struct GgmlTypeInfo {
  std::string_view name;  // "Q4_K"
  int64_t block_elems;    // elements per block (1 for plain floats)
  int64_t block_bytes;    // bytes per block
  bool can_dequantize;    // we have a decoder for it
};

// Info for any known ggml type id (including ones we cannot decode); nullopt if unknown.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type_id);

// Bytes needed for n elements; -1 if n is negative, not a multiple of block_elems, or the
// byte count overflows int64.
int64_t ggml_row_bytes(const GgmlTypeInfo& info, int64_t n);

// Decodes n elements (a multiple of the block size) from `src` into `out`. src must hold
// exactly ggml_row_bytes(n) bytes and out exactly n floats. The values equal gguf-py's
// gguf.quants.dequantize bit for bit (same f32 operation order).
Status dequantize_ggml(uint32_t type_id, std::span<const uint8_t> src, int64_t n,
                       std::span<float> out);

}  // namespace tq
