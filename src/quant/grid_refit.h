// After GPTQ has fixed the codes, each row's group scales and biases are refitted by least
// squares against the Hessian: the row's output error tr(d H dᵀ), d = w − ŵ, is quadratic in
// them (ŵ_k = s_g·q_k + b_g), so the optimum solves one 2G×2G system per row (G groups).
// A row keeps its old grids unless the refitted, dtype-rounded ones lower its error.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"
#include "quant/group_grid.h"

namespace tq {

struct RefitStats {
  int64_t rows_refit = 0;                      // rows whose grids changed
  int64_t rows_singular = 0;                   // rows whose system could not be solved
  double loss_before = 0.0, loss_after = 0.0;  // Σ over rows of the row errors
};

// w [rows, cols] the target (f32), h [cols, cols] the undamped Hessian, codes [rows, cols] and
// grids [rows, cols/group] (affine, stored values) as the sweep left them; grids are updated in
// place. The row error uses the decoded values exactly as the reader sees them.
Result<RefitStats> refit_affine_grids(const GroupCoder& coder, std::span<const float> w,
                                      int64_t rows, int64_t cols, std::span<const double> h,
                                      std::span<const uint8_t> codes,
                                      std::vector<GroupGrid>* grids);

}  // namespace tq
