// One group's quantization grid in any MLX mode, as GPTQ needs it: fit the grid to a group's
// current values, then code a value and give the exact value the decoder will produce for it.
// Affine uses the grid rounded to the stored dtype for both (FORMATS.md §2.2 recommendation);
// fp modes use MLX's scale byte and element encoders (formats/mlx_encode.h).
#pragma once

#include <cstdint>
#include <span>

#include "formats/quant_spec.h"
#include "quant/grid_search.h"
#include "tensor/dtype.h"

namespace tq {

struct GroupGrid {
  float scale = 0.0f;    // affine: stored scale; fp: the decoded scale (2^(E-127) or E4M3)
  float bias = 0.0f;     // affine: stored bias
  float divisor = 1.0f;  // fp: what elements are divided by before encoding
  uint8_t byte = 0;      // fp: the stored scale byte
};

class GroupCoder {
 public:
  GroupCoder(const QuantSpec& spec, DType dtype, GridChoice grid = GridChoice::kMinMax)
      : spec_(spec), dtype_(dtype), grid_(grid) {}

  // The group's grid; with GridChoice::kSearch an affine grid minimises Σ d_k (w_k − ŵ_k)²
  // (d empty: plain squared error). fp modes always take MLX's scale.
  GroupGrid fit(std::span<const float> group, std::span<const float> d = {}) const;
  uint8_t code(float w, const GroupGrid& g) const;
  // The decoded value of a code, bit for bit what dequantize_mlx returns.
  float value(uint8_t code, const GroupGrid& g) const;
  // |scale| as decoded (the divergence guard compares it across groups).
  static float magnitude(const GroupGrid& g) { return g.scale < 0 ? -g.scale : g.scale; }

  const QuantSpec& spec() const { return spec_; }
  DType dtype() const { return dtype_; }
  bool affine() const { return spec_.mode == QuantMode::kAffine; }
  GridChoice grid() const { return grid_; }
  // dtype of the stored scales: the weight dtype (affine) or U8 (fp modes).
  DType scale_dtype() const { return affine() ? dtype_ : DType::kU8; }

 private:
  QuantSpec spec_;
  DType dtype_;
  GridChoice grid_;
};

}  // namespace tq
