// Sampler: greedy ties, the top-p / top-k filters, temperature, and seeded determinism,
// checked against exact probabilities with enough draws to separate them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/sampling.h"

namespace tq {
namespace {

std::vector<float> log_probs(std::initializer_list<double> p) {
  std::vector<float> out;
  for (double x : p) out.push_back(static_cast<float>(std::log(x)));
  return out;
}

std::vector<double> frequencies(SamplingOptions o, const std::vector<float>& logits, int draws) {
  Sampler s(o);
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[static_cast<size_t>(s.next(logits))] += 1.0 / draws;
  return f;
}

TEST(Sampling, ArgmaxTakesTheFirstMaximumAndSkipsNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(argmax(std::vector<float>{nan, -5, nan, -4}), 3);
  EXPECT_EQ(argmax(std::vector<float>{-std::numeric_limits<float>::infinity(), -1e30f}), 1);
  Sampler greedy(SamplingOptions{});
  EXPECT_EQ(greedy.next(std::vector<float>{0.5f, 2.0f, 2.0f}), 1);
}

TEST(Sampling, TemperatureOneFollowsSoftmax) {
  auto logits = log_probs({0.5, 0.3, 0.2});
  auto f = frequencies({1.0, 1.0, 0, 7}, logits, 40000);
  EXPECT_NEAR(f[0], 0.5, 0.01);
  EXPECT_NEAR(f[1], 0.3, 0.01);
  EXPECT_NEAR(f[2], 0.2, 0.01);
}

TEST(Sampling, TemperatureSharpensAndFlattens) {
  auto logits = log_probs({0.5, 0.3, 0.2});
  // T = 2: p ∝ sqrt(p0); T = 0.5: p ∝ p0^2.
  double s2 = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.2);
  auto f2 = frequencies({2.0, 1.0, 0, 1}, logits, 40000);
  EXPECT_NEAR(f2[0], std::sqrt(0.5) / s2, 0.01);
  EXPECT_NEAR(f2[2], std::sqrt(0.2) / s2, 0.01);
  double sh = 0.25 + 0.09 + 0.04;
  auto fh = frequencies({0.5, 1.0, 0, 1}, logits, 40000);
  EXPECT_NEAR(fh[0], 0.25 / sh, 0.01);
  EXPECT_NEAR(fh[2], 0.04 / sh, 0.01);
}

TEST(Sampling, TopPKeepsTheSmallestPrefixReachingTheMass) {
  auto logits = log_probs({0.2, 0.5, 0.3});
  // 0.5 + 0.3 = 0.8 >= 0.75: token 0 is cut, the rest renormalized (0.625 / 0.375).
  auto f = frequencies({1.0, 0.75, 0, 3}, logits, 40000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[1], 0.625, 0.01);
  EXPECT_NEAR(f[2], 0.375, 0.01);
  // 0.5 >= 0.45: only the top token.
  auto g = frequencies({1.0, 0.45, 0, 3}, logits, 2000);
  EXPECT_NEAR(g[1], 1.0, 1e-9);
  // Tied with the last kept token: kept too.
  auto tied = log_probs({0.4, 0.4, 0.2});
  auto h = frequencies({1.0, 0.3, 0, 3}, tied, 20000);
  EXPECT_EQ(h[2], 0.0);
  EXPECT_NEAR(h[0], 0.5, 0.015);
}

TEST(Sampling, TopPSelectsOnTheUntemperedDistribution) {
  // mlx-lm order: the nucleus comes from softmax(logits), then the draw uses logits / T.
  auto logits = log_probs({0.6, 0.3, 0.1});
  auto f = frequencies({10.0, 0.85, 0, 5}, logits, 40000);  // keeps {0.6, 0.3}
  EXPECT_EQ(f[2], 0.0);
  double a = std::pow(0.6, 0.1), b = std::pow(0.3, 0.1);
  EXPECT_NEAR(f[0], a / (a + b), 0.01);
}

TEST(Sampling, TopK) {
  auto logits = log_probs({0.1, 0.4, 0.2, 0.3});
  auto f = frequencies({1.0, 1.0, 2, 9}, logits, 40000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_NEAR(f[1], 4.0 / 7.0, 0.01);
  auto one = frequencies({5.0, 1.0, 1, 9}, logits, 500);
  EXPECT_NEAR(one[1], 1.0, 1e-9);
}

TEST(Sampling, SameSeedSameTokens) {
  std::vector<float> flat(1000, 0.0f);
  auto run = [&](uint64_t seed) {
    Sampler s({1.0, 1.0, 0, seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.next(flat));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
  // The documented mapping: u = (mt19937_64() >> 11) * 2^-53; with equal weights, token floor(u*n).
  std::mt19937_64 ref(123);
  Sampler s({1.0, 1.0, 0, 123});
  for (int i = 0; i < 8; ++i) {
    auto want = static_cast<int32_t>(static_cast<double>(ref() >> 11) * 0x1.0p-53 * 1000);
    EXPECT_EQ(s.next(flat), want);
  }
}

TEST(Sampling, ValidateNamesTheOption) {
  EXPECT_TRUE(validate({0.7, 0.9, 40, 1}).ok());
  EXPECT_NE(validate({-1.0, 1.0, 0, 0}).error().message.find("--temp"), std::string::npos);
  EXPECT_NE(validate({1.0, 0.0, 0, 0}).error().message.find("--top-p"), std::string::npos);
  EXPECT_NE(validate({1.0, 1.5, 0, 0}).error().message.find("--top-p"), std::string::npos);
  EXPECT_NE(validate({1.0, 1.0, -2, 0}).error().message.find("--top-k"), std::string::npos);
  EXPECT_FALSE(validate({std::nan(""), 1.0, 0, 0}).ok());
}

}  // namespace
}  // namespace tq
