// GGML tensor types as stored in GGUF files and their dequantization to f32.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/result.h"

namespace tq {

// Numeric ids as in the GGUF spec (ggml_type).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kBF16 = 30,
};

struct GgmlTypeInfo {
  std::string_view name;   // "Q4_K"
  int64_t block_elems;     // elements per block (1 for plain floats)
  int64_t block_bytes;     // bytes per block
  bool can_dequantize;     // we have a decoder for it
};

// Info for any known ggml type id (including ones we cannot decode); nullopt if unknown.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type_id);

// Bytes needed for n elements (n must be a multiple of block_elems).
int64_t ggml_row_bytes(const GgmlTypeInfo& info, int64_t n);

// Decodes n elements (a multiple of the block size) from `src` into `out`.
Status dequantize_ggml(uint32_t type_id, std::span<const uint8_t> src, int64_t n,
                       std::span<float> out);

}  // namespace tq
