#include "eval/token_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace tq::eval {
namespace {

std::vector<float> random_row(std::mt19937& rng, int n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Reference in plain f64: KL(softmax(a) || softmax(b)).
double kl_f64(const std::vector<float>& a, const std::vector<float>& b) {
  double la = 0, lb = 0;
  for (size_t i = 0; i < a.size(); ++i) la += std::exp(double(a[i]));
  for (size_t i = 0; i < b.size(); ++i) lb += std::exp(double(b[i]));
  la = std::log(la);
  lb = std::log(lb);
  double kl = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double lp = a[i] - la, lq = b[i] - lb;
    kl += std::exp(lp) * (lp - lq);
  }
  return kl;
}

// exp() of each shifted logit is taken in f32 (sums in f64): NLLs are good to ~1e-8 absolute.
TEST(TokenMetrics, NllByHand) {
  // log(e + e^2 + e^3) = 3.40760596444438
  std::vector<float> x = {1, 2, 3};
  EXPECT_NEAR(logsumexp(x), 3.40760596444438, 2e-8);
  EXPECT_NEAR(token_nll(x, 0), 2.40760596444438, 2e-8);
  EXPECT_NEAR(token_nll(x, 2), 0.40760596444438, 2e-8);
  // A uniform row over V tokens: NLL = log V, whatever the offset.
  std::vector<float> u(49152, 1000.0f);
  EXPECT_NEAR(token_nll(u, 123), std::log(49152.0), 1e-9);
}

TEST(TokenMetrics, ArgmaxIsFirstMaximum) {
  EXPECT_EQ(argmax(std::vector<float>{0, 5, 5, 1}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-3}), 0);
}

TEST(TokenMetrics, KlByHand) {
  // p = [1/2, 1/2], q = [1/4, 3/4]: KL = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3).
  std::vector<float> p = {0, 0}, q = {0, float(std::log(3.0))};
  TokenCompare c = compare_rows(p, q, 1);
  EXPECT_NEAR(c.kl, 0.14384103622589042, 1e-7);
  EXPECT_NEAR(c.nll_base, std::log(2.0), 1e-12);
  EXPECT_NEAR(c.nll_cand, -std::log(0.75), 1e-7);
  EXPECT_EQ(c.argmax_base, 0);
  EXPECT_EQ(c.argmax_cand, 1);
  EXPECT_EQ(c.base_gap, 0.0f);  // base top-2 tie
}

TEST(TokenMetrics, KlMatchesF64ReferenceAndIsZeroForItself) {
  std::mt19937 rng(1);
  for (int rep = 0; rep < 5; ++rep) {
    auto a = random_row(rng, 5000, 3.0f);
    auto b = a;
    std::normal_distribution<float> noise(0.0f, 0.3f);
    for (float& v : b) v += noise(rng);
    TokenCompare c = compare_rows(a, b, 17);
    double ref = kl_f64(a, b);
    EXPECT_GT(c.kl, 0);
    EXPECT_NEAR(c.kl, ref, 1e-6 * ref);
    EXPECT_NEAR(c.nll_base, token_nll(a, 17), 1e-12);
    EXPECT_NEAR(c.nll_cand, token_nll(b, 17), 1e-12);
    TokenCompare self = compare_rows(a, a, 17);
    EXPECT_EQ(self.kl, 0.0);
    EXPECT_EQ(self.argmax_base, self.argmax_cand);
  }
}

TEST(TokenMetrics, Top2Gap) {
  std::vector<float> x = {1.0f, 4.0f, 2.5f, 3.0f};
  EXPECT_FLOAT_EQ(compare_rows(x, x, 0).base_gap, 1.0f);
  EXPECT_FLOAT_EQ(make_topk_row(x, 0, 2).gap, 1.0f);
}

TEST(TokenMetrics, TopKRowHoldsTheLargestAndTheRest) {
  std::vector<float> x = {1.0f, 4.0f, 2.5f, 4.0f, -1.0f};
  TopKRow r = make_topk_row(x, 4, 3);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, 2}));  // ties: lower id first
  EXPECT_EQ(r.logits, (std::vector<float>{4.0f, 4.0f, 2.5f}));
  double lse = logsumexp(x);
  EXPECT_NEAR(r.lse, lse, 1e-12);
  EXPECT_NEAR(r.log_rest, std::log(std::exp(1.0) + std::exp(-1.0)) - lse, 1e-7);
  EXPECT_NEAR(r.nll, lse + 1.0, 1e-12);
  EXPECT_EQ(r.gap, 0.0f);
  // k = V: nothing left over.
  EXPECT_TRUE(std::isinf(make_topk_row(x, 0, 5).log_rest));
}

TEST(TokenMetrics, TopKKlIsALowerBoundAndExactAtFullK) {
  std::mt19937 rng(2);
  auto a = random_row(rng, 1000, 2.0f), b = random_row(rng, 1000, 2.0f);
  for (size_t i = 0; i < a.size(); ++i) b[i] = 0.8f * a[i] + 0.4f * b[i];
  double full = compare_rows(a, b, 5).kl;
  double prev = 0;
  for (int k : {1, 4, 32, 256, 999}) {
    TokenCompare c = compare_topk(make_topk_row(a, 5, k), b, 5);
    EXPECT_LE(c.kl, full * (1 + 1e-6)) << k;
    EXPECT_GE(c.kl, prev - 1e-12) << k;  // finer buckets never lose divergence
    EXPECT_NEAR(c.nll_base, token_nll(a, 5), 1e-12);
    EXPECT_NEAR(c.nll_cand, token_nll(b, 5), 1e-12);
    prev = c.kl;
  }
  EXPECT_NEAR(compare_topk(make_topk_row(a, 5, 1000), b, 5).kl, full, 1e-6 * full);
  // Two buckets by hand: p = softmax(a) lumped as {argmax, rest}.
  TopKRow r1 = make_topk_row(a, 5, 1);
  double p1 = std::exp(double(r1.logits[0]) - r1.lse);
  double q1 = std::exp(double(b[r1.ids[0]]) - logsumexp(b));
  double two = p1 * std::log(p1 / q1) + (1 - p1) * std::log((1 - p1) / (1 - q1));
  EXPECT_NEAR(compare_topk(r1, b, 5).kl, two, 1e-6 * two);
  // A model against its own top-k rows: exactly 0.
  EXPECT_EQ(compare_topk(make_topk_row(a, 5, 32), a, 5).kl, 0.0);
}

TEST(TokenMetrics, SummaryByHand) {
  std::vector<double> v = {10, 2, 4, 1, 3};
  Summary s = summarize(v);
  EXPECT_EQ(s.n, 5);
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_NEAR(s.std, std::sqrt(12.5), 1e-12);  // ddof = 1
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_NEAR(s.p90, 7.6, 1e-12);   // numpy: rank 3.6 -> 4 + 0.6 * (10 - 4)
  EXPECT_NEAR(s.p99, 9.76, 1e-12);  // rank 3.96
  EXPECT_DOUBLE_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(summarize(std::vector<double>{1, 2, 3, 4}).median, 2.5);
  EXPECT_TRUE(std::isnan(summarize(std::vector<double>{1}).std));
}

TEST(TokenMetrics, PerplexityByHand) {
  std::vector<double> nll = {10, 2, 4, 1, 3};
  Perplexity p = perplexity(nll);
  EXPECT_NEAR(p.ppl, std::exp(4.0), 1e-9);
  EXPECT_NEAR(p.se, std::exp(4.0) * std::sqrt(12.5) / std::sqrt(5.0), 1e-9);
}

}  // namespace
}  // namespace tq::eval
