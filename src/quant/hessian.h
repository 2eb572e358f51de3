// GPTQ Hessian of one linear layer's inputs (FORMATS.md §5.2 step 1).
// Convention: H = (2/n) · Σ_t x_t x_tᵀ over all n token rows x_t ∈ ℝ^cols seen so far, i.e.
// H = (2/n) XᵀX for the stacked rows X [n, cols]. (The reference counts sequences, not tokens,
// in n; the overall scale does not change GPTQ's result because the damping is relative.)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"

namespace tq {

enum class HessianPrecision : uint8_t {
  kF64,       // every batch converted to f64 and added with dsyrk
  kF32Batch,  // ssyrk of each batch in f32, batch sums added into the f64 total
};

class HessianAccumulator {
 public:
  explicit HessianAccumulator(int64_t cols, HessianPrecision p = HessianPrecision::kF32Batch);

  // Adds the rows of x [rows, cols] (row-major). Rows with a NaN/inf are an error.
  Status add(std::span<const float> x, int64_t rows);

  int64_t cols() const { return cols_; }
  int64_t samples() const { return n_; }
  // The full symmetric H = (2/n)·Σ x xᵀ, [cols, cols] row-major (all zero when n = 0).
  std::vector<double> hessian() const;

 private:
  int64_t cols_;
  HessianPrecision precision_;
  int64_t n_ = 0;
  std::vector<double> sum_;     // Σ x xᵀ; only the upper triangle is maintained
  std::vector<float> scratch_;  // kF32Batch: one batch's XᵀX
  std::vector<double> xd_;      // kF64: the batch widened
};

}  // namespace tq
