// BlockedHessian: one block is exactly HessianAccumulator; several are the block sums added in
// block order (what mpirun ranks reproduce whoever holds which block).
#include <gtest/gtest.h>

#include <random>

#include "base/comm.h"
#include "quant/hessian.h"

namespace tq {
namespace {

std::vector<float> rows_of(int64_t rows, int64_t tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * tokens * cols));
  for (float& v : x) v = nd(rng);
  return x;
}

TEST(BlockedHessian, OneBlockIsThePlainAccumulator) {
  const int64_t rows = 5, tokens = 7, cols = 12;
  const std::vector<float> x = rows_of(rows, tokens, cols, 1);
  HessianAccumulator plain(cols);
  BlockedHessian blocked(cols, HessianPrecision::kF32Batch, 16, rows, nullptr, 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::span<const float> row(x.data() + r * tokens * cols, static_cast<size_t>(tokens * cols));
    ASSERT_TRUE(plain.add(row, tokens).ok());
    ASSERT_TRUE(blocked.add_row(r, row, tokens).ok());
  }
  auto h = blocked.hessian();
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, plain.hessian());
}

TEST(BlockedHessian, BlocksAddInBlockOrder) {
  const int64_t rows = 11, tokens = 3, cols = 9, block = 4;
  const std::vector<float> x = rows_of(rows, tokens, cols, 2);
  BlockedHessian blocked(cols, HessianPrecision::kF32Batch, block, rows, nullptr, 0);
  HessianAccumulator total(cols), plain(cols);
  for (int64_t b = 0; b * block < rows; ++b) {
    HessianAccumulator part(cols);
    for (int64_t r = b * block; r < std::min(rows, (b + 1) * block); ++r) {
      std::span<const float> row(x.data() + r * tokens * cols, static_cast<size_t>(tokens * cols));
      ASSERT_TRUE(part.add(row, tokens).ok());
      ASSERT_TRUE(plain.add(row, tokens).ok());
      ASSERT_TRUE(blocked.add_row(r, row, tokens).ok());
    }
    ASSERT_TRUE(total.add_packed_sum(part.packed_sum(), part.samples()).ok());
  }
  auto h = blocked.hessian();
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, total.hessian());
  const std::vector<double> p = plain.hessian();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR((*h)[i], p[i], 1e-9 * (1 + std::abs(p[i])));
}

TEST(Comm, RanksSplitItemsContiguously) {
  for (int size : {1, 2, 3, 4, 7}) {
    int64_t next = 0;
    for (int r = 0; r < size; ++r) {
      const RankRange rr = rank_range(10, r, size);
      EXPECT_EQ(rr.begin, next);
      for (int64_t i = rr.begin; i < rr.end; ++i) EXPECT_EQ(range_owner(10, i, size), r);
      next = rr.end;
    }
    EXPECT_EQ(next, 10);
  }
  EXPECT_EQ(world().size(), 1);  // no mpirun: a single rank, MPI untouched
  EXPECT_EQ(BlockedHessian::owner(33, 16, 2), 0);
  EXPECT_EQ(BlockedHessian::owner(16, 16, 2), 1);
}

TEST(AddRidge, RaisesOnlyTheDiagonalByTheFractionOfItsMean) {
  std::vector<double> h = {2, 1, 0, 1, 4, -1, 0, -1, 6};  // mean diag 4
  add_ridge(h, 3, 0.5);
  EXPECT_EQ(h, (std::vector<double>{4, 1, 0, 1, 6, -1, 0, -1, 8}));
  add_ridge(h, 3, 0.0);  // no ridge: unchanged
  EXPECT_EQ(h, (std::vector<double>{4, 1, 0, 1, 6, -1, 0, -1, 8}));
}

}  // namespace
}  // namespace tq
