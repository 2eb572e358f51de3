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

namespace tq {

std::vector<double> HessianAccumulator::packed_sum() const {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(cols_ * (cols_ + 1) / 2));
  for (int64_t i = 0; i < cols_; ++i)
    for (int64_t j = i; j < cols_; ++j) out.push_back(sum_[i * cols_ + j]);
  return out;
}

Status HessianAccumulator::add_packed_sum(std::span<const double> packed, int64_t samples) {
  if (static_cast<int64_t>(packed.size()) != cols_ * (cols_ + 1) / 2)
    return err("hessian: a packed sum of {} values for {} columns", packed.size(), cols_);
  size_t k = 0;
  for (int64_t i = 0; i < cols_; ++i)
    for (int64_t j = i; j < cols_; ++j) sum_[i * cols_ + j] += packed[k++];
  n_ += samples;
  return ok_status();
}

BlockedHessian::BlockedHessian(int64_t cols, HessianPrecision p, int64_t row_block,
                               int64_t total_rows, Comm* comm, int tag)
    : cols_(cols),
      row_block_(row_block),
      blocks_((total_rows + row_block - 1) / row_block),
      precision_(p),
      comm_(comm),
      tag_(tag),
      total_(cols, p),
      block_(0, p) {}

Status BlockedHessian::add_row(int64_t row, std::span<const float> x, int64_t tokens) {
  const int64_t b = row / row_block_;
  if (b != block_id_) {
    TQ_CHECK_OK(close_block());
    block_id_ = b;
    block_ = HessianAccumulator(cols_, precision_);
  }
  return block_.add(x, tokens);
}

Status BlockedHessian::receive_until(int64_t block) {
  const int size = comm_ ? comm_->size() : 1;
  for (; next_block_ < block; ++next_block_) {
    const int from = static_cast<int>(next_block_ % size);
    if (from == 0) continue;  // rank 0's own blocks join the total as they close
    std::vector<double> packed(static_cast<size_t>(cols_ * (cols_ + 1) / 2) + 1);
    TQ_CHECK_OK(recv_large(*comm_, from, tag_, std::span<double>(packed)));
    const auto samples = static_cast<int64_t>(packed.back());
    packed.pop_back();
    TQ_CHECK_OK(total_.add_packed_sum(packed, samples));
  }
  return ok_status();
}

Status BlockedHessian::close_block() {
  if (block_id_ < 0) return ok_status();
  const int rank = comm_ ? comm_->rank() : 0;
  if (rank == 0) {
    TQ_CHECK_OK(receive_until(block_id_));
    TQ_CHECK_OK(total_.add_packed_sum(block_.packed_sum(), block_.samples()));
    next_block_ = block_id_ + 1;
  } else {
    std::vector<double> packed = block_.packed_sum();
    packed.push_back(static_cast<double>(block_.samples()));  // exact below 2^53
    TQ_CHECK_OK(send_large(*comm_, 0, tag_, std::span<const double>(packed)));
  }
  block_id_ = -1;
  block_ = HessianAccumulator(0, precision_);
  return ok_status();
}

Result<std::vector<double>> BlockedHessian::hessian() {
  TQ_CHECK_OK(close_block());
  if (comm_ && comm_->rank() != 0) return std::vector<double>();
  TQ_CHECK_OK(receive_until(blocks_));
  return total_.hessian();
}

void add_ridge(std::vector<double>& h, int64_t cols, double ridge) {
  if (!(ridge > 0.0) || cols <= 0) return;
  double mean = 0.0;
  for (int64_t i = 0; i < cols; ++i) mean += h[static_cast<size_t>(i * cols + i)];
  mean /= static_cast<double>(cols);
  for (int64_t i = 0; i < cols; ++i) h[static_cast<size_t>(i * cols + i)] += ridge * mean;
}

}  // namespace tq
