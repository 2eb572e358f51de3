#include "quant/hessian.h"

#include <cblas.h>

#include <cmath>

namespace tq {

HessianAccumulator::HessianAccumulator(int64_t cols, HessianPrecision p)
    : cols_(cols), precision_(p), sum_(static_cast<size_t>(cols * cols), 0.0) {}

Status HessianAccumulator::add(std::span<const float> x, int64_t rows) {
  if (rows < 0 || static_cast<int64_t>(x.size()) != rows * cols_)
    return err("hessian: {} values given for {} rows of {} columns", x.size(), rows, cols_);
  if (rows == 0) return ok_status();
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]))
      return err("hessian: input row {} column {} is {}", i / cols_, i % cols_, x[i]);
  const int n = static_cast<int>(cols_), k = static_cast<int>(rows);
  if (precision_ == HessianPrecision::kF64) {
    xd_.assign(x.begin(), x.end());
    // sum (upper) += Xᵀ X with X [rows, cols] row-major
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, n, k, 1.0, xd_.data(), n, 1.0, sum_.data(),
                n);
  } else {
    scratch_.resize(sum_.size());
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, n, k, 1.0f, x.data(), n, 0.0f,
                scratch_.data(), n);
    for (int64_t i = 0; i < cols_; ++i)
      for (int64_t j = i; j < cols_; ++j) sum_[i * cols_ + j] += scratch_[i * cols_ + j];
  }
  n_ += rows;
  return ok_status();
}

std::vector<double> HessianAccumulator::hessian() const {
  std::vector<double> h(sum_.size(), 0.0);
  if (n_ == 0) return h;
  const double f = 2.0 / static_cast<double>(n_);
  for (int64_t i = 0; i < cols_; ++i)
    for (int64_t j = i; j < cols_; ++j)
      h[i * cols_ + j] = h[j * cols_ + i] = f * sum_[i * cols_ + j];
  return h;
}

}  // namespace tq
