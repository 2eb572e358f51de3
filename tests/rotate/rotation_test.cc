#include "rotate/rotation.h"

#include <gtest/gtest.h>

#include <cmath>

#include "../testing/test_files.h"

namespace tq {
namespace {

std::vector<double> seeded_values(size_t n, uint64_t seed) {
  SeededRng rng(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = rng.gaussian();
  return v;
}

// Q = D·(H_K ⊗ Sylvester)/√n as a dense matrix, built independently of the fast transform.
std::vector<double> dense_hadamard(const Rotation& r) {
  HadamardMatrix full = kronecker(r.hk, sylvester_hadamard(int64_t{1} << r.m));
  const int64_t n = r.n;
  std::vector<double> q(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      q[i * n + j] = r.signs[i] * full.at(i, j) / std::sqrt(double(n));
  return q;
}

TEST(SeededRng, IsTheStandardMersenneTwister) {
  SeededRng rng(
      5489);  // the standard's default seed: the 10000th output is pinned by [rand.predef]
  uint64_t x = 0;
  for (int i = 0; i < 10000; ++i) x = rng.next();
  EXPECT_EQ(x, 9981545732273789042ull);
}

TEST(SeededRng, GaussianMoments) {
  std::vector<double> v = seeded_values(200000, 7);
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) var += (x - mean) * (x - mean);
  var /= v.size();
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
  EXPECT_EQ(seeded_values(10, 3), seeded_values(10, 3));
  EXPECT_NE(seeded_values(10, 3), seeded_values(10, 4));
}

// The fast transform (butterfly on 2^m, dense H_K) equals the dense product, both directions.
TEST(Rotation, FastHadamardEqualsDenseProduct) {
  for (int64_t n : {1, 8, 48, 104, 160, 576, 896}) {
    auto r = make_rotation(RotationKind::kHadamard, n, stream_seed(3, 0), "n", "--r1");
    ASSERT_TRUE(r.ok()) << r.error().message;
    std::vector<double> q = dense_hadamard(*r);
    const int64_t rows = 3, cols = 5;
    std::vector<double> x = seeded_values(rows * n, 11);  // [rows, n]
    std::vector<double> want(rows * n, 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < n; ++k) want[i * n + j] += x[i * n + k] * q[k * n + j];
    std::vector<double> got = x;
    rotate_rows(*r, got.data(), rows);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << n;
    std::vector<float> gotf(x.begin(), x.end());
    rotate_rows(*r, gotf.data(), rows);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(gotf[i], want[i], 2e-5) << n;

    // Qᵀ·M on M [n, cols], embedded with a row stride > cols.
    const int64_t stride = cols + 2;
    std::vector<double> m = seeded_values(n * stride, 12);
    std::vector<double> wantm = m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += q[k * n + i] * m[k * stride + c];
        wantm[i * stride + c] = s;
      }
    rotate_cols_t(*r, m.data(), cols, stride);
    for (size_t i = 0; i < m.size(); ++i) ASSERT_NEAR(m[i], wantm[i], 1e-12) << n << " " << i;
    std::vector<double> mat = rotation_matrix(*r);
    ASSERT_EQ(mat.size(), q.size());
    for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(mat[i], q[i], 1e-15);
  }
}

// R·Rᵀ = I within 1e-6, with Q as the f32 fold applies it, for both kinds.
TEST(Rotation, OrthogonalInF32) {
  for (RotationKind kind : {RotationKind::kHadamard, RotationKind::kRandom})
    for (int64_t n : {64, 128, 576}) {
      auto r = make_rotation(kind, n, stream_seed(1, 0), "n", "--r1");
      ASSERT_TRUE(r.ok()) << r.error().message;
      std::vector<float> q(n * n, 0.0f);
      for (int64_t i = 0; i < n; ++i) q[i * n + i] = 1.0f;
      rotate_rows(*r, q.data(), n);  // rows of Q in f32
      double worst = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t k = 0; k < n; ++k) s += double(q[i * n + k]) * q[j * n + k];
          worst = std::max(worst, std::abs(s - (i == j ? 1.0 : 0.0)));
        }
      EXPECT_LT(worst, 1e-6) << rotation_kind_name(kind) << " n=" << n;
    }
}

TEST(Rotation, RandomIsQrOfTheSeededGaussian) {
  const int64_t n = 24;
  auto r = make_rotation(RotationKind::kRandom, n, 99, "n", "--r1");
  ASSERT_TRUE(r.ok());
  std::vector<double> g = seeded_values(n * n, 99);  // row-major G
  // R = Qᵀ·G must be upper triangular with a positive diagonal.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += r->dense[k * n + i] * g[k * n + j];
      if (i == j)
        EXPECT_GT(s, 0.0);
      else
        EXPECT_NEAR(s, 0.0, 1e-10) << i << "," << j;
    }
}

TEST(Rotation, SeedPinsEverything) {
  auto a = make_rotation(RotationKind::kHadamard, 576, stream_seed(5, 0), "n", "--r1");
  auto b = make_rotation(RotationKind::kHadamard, 576, stream_seed(5, 0), "n", "--r1");
  auto c = make_rotation(RotationKind::kHadamard, 576, stream_seed(6, 0), "n", "--r1");
  EXPECT_EQ(a->signs, b->signs);
  EXPECT_NE(a->signs, c->signs);
  EXPECT_NE(stream_seed(5, 0), stream_seed(5, 1));
  auto x = make_rotation(RotationKind::kRandom, 32, 5, "n", "--r1");
  auto y = make_rotation(RotationKind::kRandom, 32, 5, "n", "--r1");
  EXPECT_EQ(x->dense, y->dense);
}

TEST(Rotation, UnconstructibleSizeNamesItAndSuggestsRandom) {
  auto r = make_rotation(RotationKind::kHadamard, 156, 0, "hidden_size", "--r1");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(testing::contains(r.error().message, "hidden_size 156")) << r.error().message;
  EXPECT_TRUE(testing::contains(r.error().message, "--r1 random")) << r.error().message;
  EXPECT_TRUE(make_rotation(RotationKind::kRandom, 156, 0, "hidden_size", "--r1").ok());
  EXPECT_TRUE(parse_rotation_kind("random").ok());
  EXPECT_FALSE(parse_rotation_kind("givens").ok());
}

}  // namespace
}  // namespace tq
