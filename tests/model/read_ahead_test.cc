// ReadAhead: a waiting thread requests exactly the rows of its own first slice of the next
// product (across the product's matrices), stops at its budget, and starts over on a new one.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "formats/quant_spec.h"
#include "model/read_ahead.h"

namespace tq {
namespace {

struct Matrix {
  std::vector<uint8_t> data, scales, biases;
  PackedMatrix m;
  Matrix(int64_t rows, int64_t cols) {
    data.assign(static_cast<size_t>(rows * cols / 2), 0x11);
    scales.assign(static_cast<size_t>(rows * cols / 64 * 2), 0);
    biases = scales;
    QuantSpec spec;  // affine 4-bit g64
    m = make_quant_matrix(spec, rows, cols, data, DType::kBF16, scales, biases).value();
  }
  int64_t row_bytes() const { return m.row_bytes() + 2 * m.groups() * 2; }
};

// Steps thread t until it has nothing left; returns the number of steps that did something.
int drain(ReadAhead& ra, int t) {
  int steps = 0;
  while (ra.step(t) && steps < 100000) ++steps;
  EXPECT_LT(steps, 100000);
  return steps;
}

TEST(ReadAhead, RequestsTheThreadsOwnSliceOfTheNextProduct) {
  ThreadPool pool(2);
  Matrix q(256, 2048), k(64, 2048), v(64, 2048);
  const ProductRows qkv{{&q.m, &k.m, &v.m}, 3};
  {
    ReadAhead ra(pool, 8, 1, int64_t{1} << 30);
    EXPECT_FALSE(ra.step(0));  // nothing next yet
    ra.next(&qkv);
    // 384 rows in two slices: thread 0 rows 0-191 of q; thread 1 rows 192-255 of q, all of k, v.
    drain(ra, 0);
    EXPECT_EQ(ra.requested(0), 192 * q.row_bytes());
    EXPECT_GT(drain(ra, 1), 1);
    EXPECT_EQ(ra.requested(1), 64 * q.row_bytes() + 64 * k.row_bytes() + 64 * v.row_bytes());
    EXPECT_FALSE(ra.step(1));  // done until the next product
    const ProductRows o{{&k.m}, 1};
    ra.next(&o);
    drain(ra, 1);
    EXPECT_EQ(ra.requested(1), 32 * k.row_bytes());
    EXPECT_FALSE(ra.step(5));  // not a pool thread
  }
}

TEST(ReadAhead, StopsAtItsBudget) {
  ThreadPool pool(2);
  Matrix w(4096, 2048);
  const ProductRows p{{&w.m}, 1};
  const int64_t budget = 100000;
  ReadAhead ra(pool, 8, 1, budget);
  ra.next(&p);
  drain(ra, 0);
  EXPECT_GE(ra.requested(0), budget);
  EXPECT_LT(ra.requested(0), budget + 8 * w.row_bytes());  // at most one strip over
}

}  // namespace
}  // namespace tq
