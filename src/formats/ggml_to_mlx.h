// GGML block types that are exactly an MLX quantization, re-encoded without loss so the fast
// kernels run them as they are stored: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 are affine with groups of
// 32 (scale d, bias m or -2^(b-1)·d, f16), MXFP4 is mxfp4 (E2M1 codes, E8M0 scales).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "tensor/dtype.h"

namespace tq {

// The MLX form of a GGML type (nullopt: none is exact).
std::optional<QuantSpec> ggml_mlx_spec(uint32_t ggml_type);

// One matrix as an MLX checkpoint stores it: packed codes (the U32 weight's bytes), scales and
// (affine) biases, row-major [rows, cols / group].
struct MlxQuantBytes {
  QuantSpec spec;
  DType scale_dtype = DType::kF16;  // U8 for mxfp4
  std::vector<uint8_t> weight, scales, biases;
};

// Re-encodes `rows` rows of `cols` elements of GGML blocks. Errors when the type has no exact
// MLX form, or a derived bias (-8·d, -16·d, -128·d) overflows f16.
Result<MlxQuantBytes> ggml_to_mlx(uint32_t ggml_type, std::span<const uint8_t> src, int64_t rows,
                                  int64_t cols);

}  // namespace tq
