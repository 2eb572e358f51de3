// GPTQ Hessian of one linear layer's inputs (FORMATS.md §5.2 step 1).
// Convention: H = (2/n) · Σ_t x_t x_tᵀ over all n token rows x_t ∈ ℝ^cols seen so far, i.e.
// H = (2/n) XᵀX for the stacked rows X [n, cols]. (The reference counts sequences, not tokens,
// in n; the overall scale does not change GPTQ's result because the damping is relative.)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/comm.h"
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

  // Σ x xᵀ's upper triangle packed row by row ([cols·(cols+1)/2]), and adding such a sum of
  // `samples` rows elementwise: how blocks computed elsewhere join a total.
  std::vector<double> packed_sum() const;
  Status add_packed_sum(std::span<const double> packed, int64_t samples);

 private:
  int64_t cols_;
  HessianPrecision precision_;
  int64_t n_ = 0;
  std::vector<double> sum_;     // Σ x xᵀ; only the upper triangle is maintained
  std::vector<float> scratch_;  // kF32Batch: one batch's XᵀX
  std::vector<double> xd_;      // kF64: the batch widened
};

}  // namespace tq

namespace tq {

// H over calibration rows cut into fixed blocks of `row_block` rows: each block summed on its
// own in row order (as HessianAccumulator does), the block sums added in block order on rank 0.
// Blocks go to ranks round-robin (block b to rank b % size), so every rank's rows can be fed
// here in increasing order and the total has the same bytes for any rank count. With one
// block (rows <= row_block) it equals a plain HessianAccumulator over all rows.
class BlockedHessian {
 public:
  BlockedHessian(int64_t cols, HessianPrecision p, int64_t row_block, int64_t total_rows,
                 Comm* comm, int tag);

  // Adds global calibration row `row` (one of this rank's, in increasing order) of `tokens`
  // token vectors x [tokens, cols].
  Status add_row(int64_t row, std::span<const float> x, int64_t tokens);

  // Every rank calls it; rank 0 gets H (as HessianAccumulator::hessian), the others nothing.
  Result<std::vector<double>> hessian();

  static int owner(int64_t row, int64_t row_block, int size) {
    return static_cast<int>((row / row_block) % size);
  }

 private:
  Status close_block();
  Status receive_until(int64_t block);  // rank 0: adds other ranks' blocks before `block`

  int64_t cols_, row_block_, blocks_;
  HessianPrecision precision_;
  Comm* comm_;
  int tag_;
  HessianAccumulator total_, block_;
  int64_t block_id_ = -1;   // the block being summed (-1: none)
  int64_t next_block_ = 0;  // rank 0: blocks below this are in the total
};

// Adds ridge·mean(diag h) to h's diagonal (h [cols, cols]): a penalty on plain weight error
// beside the output error, as for a tied head that is also the embedding (GptqQuantizer).
void add_ridge(std::vector<double>& h, int64_t cols, double ridge);

}  // namespace tq
