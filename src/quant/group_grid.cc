#include "quant/group_grid.h"

#include "formats/mlx_encode.h"
#include "formats/mlx_float.h"
#include "formats/mlx_quant.h"

namespace tq {

GroupGrid GroupCoder::fit(std::span<const float> group, std::span<const float> d) const {
  GroupGrid g;
  if (affine() && grid_ == GridChoice::kSearch) {
    const StoredAffine a = search_affine_grid(group, d, spec_.bits, dtype_);
    g.scale = a.scale;
    g.bias = a.bias;
    return g;
  }
  if (affine()) {
    const AffineGrid a = affine_grid(group, spec_.bits, dtype_);
    g.scale = a.stored_scale;
    g.bias = a.stored_bias;
    return g;
  }
  const FpGroupScale s = fp_group_scale(spec_.mode, group, dtype_);
  g.byte = s.byte;
  g.divisor = s.divisor;
  g.scale = spec_.mode == QuantMode::kNvfp4 ? e4m3_to_f32(s.byte) : e8m0_to_f32(s.byte);
  return g;
}

uint8_t GroupCoder::code(float w, const GroupGrid& g) const {
  if (affine()) return static_cast<uint8_t>(affine_code(w, g.scale, g.bias, spec_.bits));
  return fp_code(spec_.mode, w, g.divisor, dtype_);
}

float GroupCoder::value(uint8_t code, const GroupGrid& g) const {
  if (affine()) return affine_dequant_value(g.scale, code, g.bias, dtype_);
  const float e = spec_.mode == QuantMode::kMxfp8 ? e4m3_to_f32(code) : e2m1_to_f32(code);
  return round_bf16_mlx(g.scale * e);  // as dequantize_mlx: exact product, rounded to bf16
}

}  // namespace tq
