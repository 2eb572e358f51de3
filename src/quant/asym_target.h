// Asymmetric calibration (`--gptq-asym`): each matrix is fitted to the float model's output
// W·x_f, not to W·x_q, where x_q is its input in the partly quantized model. The least-squares
// optimum of Σ_t |W x_f,t − Q x_q,t|² over an unconstrained Q is W* = W + W Δ H⁻¹, with
// H = (2/n) Σ x_q x_qᵀ and Δ = (2/n) Σ (x_f − x_q) x_qᵀ, and the loss splits into a constant
// plus tr((W* − Q) H (W* − Q)ᵀ): GPTQ of W* against H minimises it (docs/GPTQ.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"

namespace tq {

// Δ = (2/n) Σ_t (f_t − q_t) q_tᵀ over token rows f_t, q_t ∈ ℝ^cols: f32 products per call,
// summed in f64 in call order.
class CrossAccumulator {
 public:
  explicit CrossAccumulator(int64_t cols) : cols_(cols) {}
  // f, q [rows, cols] row-major: the same tokens in the float and the quantized model.
  Status add(std::span<const float> f, std::span<const float> q, int64_t rows);
  int64_t samples() const { return n_; }
  std::vector<double> delta() const;  // [cols, cols] row-major: Δ[j][k] = (2/n) Σ d_j q_k

 private:
  int64_t cols_, n_ = 0;
  std::vector<double> sum_;
  std::vector<float> diff_, scratch_;
};

// W* = W + W Δ (H + λ I)⁻¹ for w [rows, cols], λ = damp · mean(diag H) (the ridge keeps the
// correction small where the calibration has no energy). The result is f32 [rows, cols].
Result<std::vector<float>> asym_target(std::span<const float> w, int64_t rows, int64_t cols,
                                       std::span<const double> delta, std::span<const double> h,
                                       double damp);

}  // namespace tq
