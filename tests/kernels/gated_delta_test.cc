// The Gated DeltaNet kernels against a plain per-token reference written out here, and the
// chunked (WY) form against the token-by-token one: Hv > Hk, chunks that do not divide the
// length, a prefill followed by decode steps through the carried state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "kernels/gated_delta.h"

namespace tq {
namespace {

std::vector<float> randn(std::mt19937& g, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

struct Inputs {
  GatedDeltaDims d;
  int64_t n;
  std::vector<float> qkv, b, a, a_log, dt_bias;
};

Inputs make(GatedDeltaDims d, int64_t n, unsigned seed) {
  std::mt19937 g(seed);
  Inputs in{d, n};
  in.qkv = randn(g, n * d.conv_dim(), 1.0f);
  in.b = randn(g, n * d.hv, 1.0f);
  in.a = randn(g, n * d.hv, 1.0f);
  in.a_log = randn(g, d.hv, 1.0f);
  in.dt_bias = randn(g, d.hv, 0.5f);
  return in;
}

// The recurrence as docs/QWEN35.md states it, in double.
std::vector<double> reference(const Inputs& in, std::vector<double>& S) {
  const GatedDeltaDims& d = in.d;
  const int64_t C = d.conv_dim(), kd = d.key_dim();
  std::vector<double> y(in.n * d.value_dim());
  for (int64_t t = 0; t < in.n; ++t)
    for (int64_t h = 0; h < d.hv; ++h) {
      const int64_t hk = h / (d.hv / d.hk);
      std::vector<double> q(d.dk), k(d.dk);
      double sq = 0, sk = 0;
      for (int64_t j = 0; j < d.dk; ++j) {
        q[j] = in.qkv[t * C + hk * d.dk + j], k[j] = in.qkv[t * C + kd + hk * d.dk + j];
        sq += q[j] * q[j], sk += k[j] * k[j];
      }
      for (int64_t j = 0; j < d.dk; ++j)
        q[j] *= 1.0 / std::sqrt(double(d.dk)) / std::sqrt(sq + 1e-6), k[j] /= std::sqrt(sk + 1e-6);
      const double x = in.a[t * d.hv + h] + in.dt_bias[h];
      const double g = std::exp(-std::exp(double(in.a_log[h])) * std::log1p(std::exp(x)));
      const double beta = 1.0 / (1.0 + std::exp(-double(in.b[t * d.hv + h])));
      for (int64_t i = 0; i < d.dv; ++i) {
        double* row = S.data() + (h * d.dv + i) * d.dk;
        double m = 0;
        for (int64_t j = 0; j < d.dk; ++j) row[j] *= g, m += row[j] * k[j];
        const double delta = beta * (in.qkv[t * C + 2 * kd + h * d.dv + i] - m);
        double o = 0;
        for (int64_t j = 0; j < d.dk; ++j) row[j] += k[j] * delta, o += row[j] * q[j];
        y[t * d.value_dim() + h * d.dv + i] = o;
      }
    }
  return y;
}

double max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

TEST(GatedDelta, TokenByTokenAndChunkedMatchTheRecurrence) {
  for (const GatedDeltaDims d :
       {GatedDeltaDims{1, 1, 16, 8}, GatedDeltaDims{2, 4, 32, 16}, GatedDeltaDims{1, 3, 24, 20}}) {
    for (const int64_t chunk : {0, 1, 7, 64}) {
      Inputs in = make(d, 150, 42);
      std::vector<double> S(d.state_size(), 0.0);
      const std::vector<double> want = reference(in, S);
      std::vector<float> state(d.state_size(), 0.0f), y(in.n * d.value_dim());
      gated_delta_rule(d, in.qkv.data(), in.b.data(), in.a.data(), in.a_log.data(),
                       in.dt_bias.data(), state.data(), in.n, y.data(), chunk);
      EXPECT_LT(max_diff(y, want), 2e-5) << "hv " << d.hv << " chunk " << chunk;
      std::vector<double> sd(state.begin(), state.end());
      double ms = 0;
      for (size_t i = 0; i < sd.size(); ++i) ms = std::max(ms, std::abs(sd[i] - S[i]));
      EXPECT_LT(ms, 2e-5) << "state, hv " << d.hv << " chunk " << chunk;
    }
  }
}

TEST(GatedDelta, PrefillThenDecodeCarriesTheState) {
  const GatedDeltaDims d{2, 4, 16, 8};
  Inputs all = make(d, 40, 7);
  std::vector<double> S(d.state_size(), 0.0);
  const std::vector<double> want = reference(all, S);
  // 33 tokens chunked, then one at a time.
  std::vector<float> state(d.state_size(), 0.0f), y(all.n * d.value_dim());
  const int64_t C = d.conv_dim(), p = 33;
  gated_delta_rule(d, all.qkv.data(), all.b.data(), all.a.data(), all.a_log.data(),
                   all.dt_bias.data(), state.data(), p, y.data(), 16);
  for (int64_t t = p; t < all.n; ++t)
    gated_delta_rule(d, all.qkv.data() + t * C, all.b.data() + t * d.hv, all.a.data() + t * d.hv,
                     all.a_log.data(), all.dt_bias.data(), state.data(), 1,
                     y.data() + t * d.value_dim());
  EXPECT_LT(max_diff(y, want), 2e-5);
}

// The chunked form with OpenBLAS's triangular solve against the scalar forward substitution,
// at the Qwen3.5-0.8B-like head size, with the value heads split in two ranges (as over threads).
TEST(GatedDelta, BlasSolveMatchesTheScalarSolveOverHeadRanges) {
  const GatedDeltaDims d{2, 4, 128, 128};
  Inputs in = make(d, 70, 11);
  gated_delta_normalize_qk(d, in.qkv.data(), in.n);
  std::vector<float> s_ref(d.state_size(), 0.0f), y_ref(in.n * d.value_dim());
  gated_delta_chunks(d, in.qkv.data(), in.b.data(), in.a.data(), in.a_log.data(), in.dt_bias.data(),
                     s_ref.data(), in.n, y_ref.data(), 32, 0, d.hv, false);
  std::vector<float> s(d.state_size(), 0.0f), y(in.n * d.value_dim());
  for (const auto& [h0, h1] : {std::pair<int64_t, int64_t>{0, 1}, {1, 4}})
    gated_delta_chunks(d, in.qkv.data(), in.b.data(), in.a.data(), in.a_log.data(),
                       in.dt_bias.data(), s.data(), in.n, y.data(), 32, h0, h1);
  float my = 0, ms = 0;
  for (size_t i = 0; i < y.size(); ++i) my = std::max(my, std::abs(y[i] - y_ref[i]));
  for (size_t i = 0; i < s.size(); ++i) ms = std::max(ms, std::abs(s[i] - s_ref[i]));
  EXPECT_LT(my, 1e-5f);
  EXPECT_LT(ms, 1e-5f);
  // Not trivially equal: the outputs are not all zero.
  EXPECT_GT(*std::max_element(y.begin(), y.end()), 1e-3f);
}

TEST(GatedDelta, ConvCarriesItsStateAcrossCalls) {
  const int64_t C = 5, K = 4, n = 9;
  std::mt19937 g(3);
  const std::vector<float> w = randn(g, C * K, 0.5f), x0 = randn(g, n * C, 1.0f);
  std::vector<float> whole = x0, split = x0, s1(C * (K - 1), 0.0f), s2(C * (K - 1), 0.0f);
  causal_conv1d_silu(w.data(), C, K, s1.data(), whole.data(), n);
  causal_conv1d_silu(w.data(), C, K, s2.data(), split.data(), 2);
  causal_conv1d_silu(w.data(), C, K, s2.data(), split.data() + 2 * C, n - 2);
  for (int64_t i = 0; i < n * C; ++i) EXPECT_NEAR(whole[i], split[i], 1e-6f);
  EXPECT_EQ(s1, s2);
  // Channels split in two ranges (as over threads) give the same outputs and state.
  std::vector<float> parts = x0, s3(C * (K - 1), 0.0f);
  causal_conv1d_silu(w.data(), C, K, s3.data(), parts.data(), n, 0, 2);
  causal_conv1d_silu(w.data(), C, K, s3.data(), parts.data(), n, 2, C);
  EXPECT_EQ(parts, whole);
  EXPECT_EQ(s3, s1);
  // Token 0 sees only itself (zero history): silu(w[c, K-1] x[0, c]).
  for (int64_t c = 0; c < C; ++c) {
    const float v = w[c * K + K - 1] * x0[c];
    EXPECT_NEAR(whole[c], v / (1.0f + std::exp(-v)), 1e-6f);
  }
}

}  // namespace
}  // namespace tq
