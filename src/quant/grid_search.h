// Affine grids chosen by error rather than by range (docs/GPTQ.md, "Grids"). The result is the
// same MLX layout (one scale and one bias per group, stored in the weight dtype), so stock mlx-lm
// loads it unchanged; only the values differ from mx.quantize's min/max grid.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace tq {

// How each affine group's scale and bias are chosen.
enum class GridChoice : uint8_t {
  kMinMax,  // mx.quantize's grid: the group's range, the larger-magnitude end exact
  kSearch,  // the lowest weighted squared error among clipped ranges and least-squares refits
};

const char* grid_choice_name(GridChoice g);
bool parse_grid_choice(const std::string& s, GridChoice* out);

struct StoredAffine {
  float scale = 0.0f;  // as stored (rounded to the dtype)
  float bias = 0.0f;
};

// The grid of one group of finite values w minimising Σ d_k (w_k − ŵ_k)², ŵ the value decoded
// from the code affine_code picks against the stored pair. d empty means all ones; negative or
// non-finite weights are not allowed. Never worse (in that error) than mx.quantize's grid, which
// is one of the candidates. bits 2..8 (1-bit groups keep min/max).
StoredAffine search_affine_grid(std::span<const float> w, std::span<const float> d, int bits,
                                DType dtype);

// Σ d_k (w_k − (s·q_k + b))² with the codes affine_code gives for (s, b), in f64.
double affine_group_error(std::span<const float> w, std::span<const float> d, float s, float b,
                          int bits);

}  // namespace tq
