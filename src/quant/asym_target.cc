#include "quant/asym_target.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>

namespace tq {

Status CrossAccumulator::add(std::span<const float> f, std::span<const float> q, int64_t rows) {
  if (rows < 0 || static_cast<int64_t>(f.size()) != rows * cols_ || f.size() != q.size())
    return err("asym: {} and {} values given for {} rows of {} columns", f.size(), q.size(), rows,
               cols_);
  if (rows == 0) return ok_status();
  diff_.resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    diff_[i] = f[i] - q[i];
    if (!std::isfinite(diff_[i]))
      return err("asym: input row {} column {} is not finite", i / cols_, i % cols_);
  }
  const int n = static_cast<int>(cols_), k = static_cast<int>(rows);
  scratch_.resize(static_cast<size_t>(cols_ * cols_));
  sum_.resize(scratch_.size(), 0.0);
  // scratch = Dᵀ Q with D, Q [rows, cols] row-major
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, n, k, 1.0f, diff_.data(), n, q.data(), n,
              0.0f, scratch_.data(), n);
  for (size_t i = 0; i < scratch_.size(); ++i) sum_[i] += scratch_[i];
  n_ += rows;
  return ok_status();
}

std::vector<double> CrossAccumulator::delta() const {
  std::vector<double> d(static_cast<size_t>(cols_ * cols_), 0.0);
  if (n_ == 0) return d;
  const double s = 2.0 / static_cast<double>(n_);
  for (size_t i = 0; i < sum_.size(); ++i) d[i] = s * sum_[i];
  return d;
}

Result<std::vector<float>> asym_target(std::span<const float> w, int64_t rows, int64_t cols,
                                       std::span<const double> delta, std::span<const double> h,
                                       double damp) {
  const auto cc = static_cast<size_t>(cols * cols);
  if (static_cast<int64_t>(w.size()) != rows * cols || delta.size() != cc || h.size() != cc)
    return err("asym: shapes do not fit a [{}, {}] matrix", rows, cols);
  double mean_diag = 0.0;
  for (int64_t j = 0; j < cols; ++j) mean_diag += h[static_cast<size_t>(j * cols + j)];
  mean_diag /= static_cast<double>(cols);
  std::vector<float> out(w.begin(), w.end());
  if (!(mean_diag > 0.0)) return out;  // no calibration energy: nothing to correct
  std::vector<double> k(h.begin(), h.end());
  const double lambda = std::max(damp, 1e-6) * mean_diag;
  for (int64_t j = 0; j < cols; ++j) k[static_cast<size_t>(j * cols + j)] += lambda;
  // E = W Δ [rows, cols]; then each row e_r becomes K⁻¹ e_r (K symmetric: E's rows are the
  // columns of a column-major [cols, rows] right-hand side).
  std::vector<double> wd(w.begin(), w.end()), e(static_cast<size_t>(rows * cols));
  const int n = static_cast<int>(cols), m = static_cast<int>(rows);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, n, 1.0, wd.data(), n, delta.data(),
              n, 0.0, e.data(), n);
  const lapack_int info = LAPACKE_dposv(LAPACK_COL_MAJOR, 'U', n, m, k.data(), n, e.data(), n);
  if (info != 0) return err("asym: H + λI is not positive definite (info {})", info);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(wd[i] + e[i]);
  for (float v : out)
    if (!std::isfinite(v)) return err("asym: the corrected weights are not finite");
  return out;
}

}  // namespace tq
