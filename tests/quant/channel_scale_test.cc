// Channel scaling: the scale vector's shape (centred, floored, alpha 0 is identity), the alpha
// search (never worse than unscaled, no gain where activations are flat, a clear gain where a
// few channels carry large activations) and the transform's folds computing the same function.
#include "quant/channel_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "convert/channel_scale_run.h"
#include "model/tensor_table.h"

namespace tq {
namespace {

FloatTensor gaussian(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  FloatTensor t{{rows, cols}, std::vector<float>(static_cast<size_t>(rows * cols))};
  for (auto& x : t.data) x = nd(rng);
  return t;
}

QuantSpec affine(int bits) {
  QuantSpec s;
  s.mode = QuantMode::kAffine;
  s.bits = bits;
  s.group_size = 64;
  return s;
}

TEST(ChannelScale, ScaleVectorIsCentredAndFloored) {
  const std::vector<double> h = {4.0, 1.0, 0.0, 16.0};
  for (float s : channel_scale_for(h, 0.0)) EXPECT_FLOAT_EQ(s, 1.0f);
  const auto s = channel_scale_for(h, 1.0);
  // m = (2, 1, 4e-5 (floored), 4); centred on sqrt(4 · 4e-5).
  const double c = std::sqrt(4.0 * 4e-5);
  EXPECT_NEAR(s[0], 2.0 / c, 1e-3 * 2.0 / c);
  EXPECT_NEAR(s[2], 4e-5 / c, 1e-6);
  EXPECT_NEAR(s[3] * s[2], 1.0, 1e-4);  // max · min = 1
}

TEST(ChannelScale, FlatActivationsKeepAlphaZero) {
  const FloatTensor w = gaussian(32, 128, 1);
  const std::vector<double> h(128, 0.7);
  const FloatTensor* ws[] = {&w};
  auto f = fit_channel_scale(ws, h, affine(3), DType::kF32);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->alpha, 0.0);
  EXPECT_DOUBLE_EQ(f->error, f->error_unscaled);
}

TEST(ChannelScale, OutlierChannelsGainAndNeverLose) {
  for (int bits : {2, 3, 4}) {
    const FloatTensor a = gaussian(48, 256, 2), b = gaussian(16, 256, 3);
    std::vector<double> h(256, 1.0);
    std::mt19937 rng(4);
    for (int k = 0; k < 8; ++k) h[rng() % 256] = 400.0;  // a few channels 20x larger
    const FloatTensor* ws[] = {&a, &b};
    auto f = fit_channel_scale(ws, h, affine(bits), DType::kF32);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_GT(f->alpha, 0.0) << bits;
    EXPECT_LT(f->error, 0.8 * f->error_unscaled) << bits;
    ASSERT_EQ(f->scale.size(), 256u);
  }
}

TEST(ChannelScale, RejectsAMatrixOfAnotherWidth) {
  const FloatTensor w = gaussian(8, 64, 5);
  const std::vector<double> h(128, 1.0);
  const FloatTensor* ws[] = {&w};
  EXPECT_FALSE(fit_channel_scale(ws, h, affine(4), DType::kF32).ok());
}

// The folds: (γ/s)·(W·s) per channel, and down·s · up/s per intermediate channel, equal the
// originals, for every family that allows it; qwen3_5 and an MLP with bias are refused.
TEST(ChannelScale, TransformKeepsTheFunction) {
  ModelConfig cfg;
  cfg.family = Family::kLlama;
  cfg.num_hidden_layers = 1;
  ChannelScales cs;
  cs.layers.resize(1);
  const int64_t d = 64, f = 128;
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u(0.2f, 5.0f);
  for (int p = 0; p < kScalePoints; ++p)
    for (int64_t j = 0; j < (p == 2 ? f : d); ++j) cs.layers[0].scale[p].push_back(u(rng));
  auto name = [&](TensorRole r) {
    for (const TensorKind& k : family_table(cfg.family))
      if (k.role == r) return tensor_name(k, 0);
    return std::string();
  };
  TensorMap t;
  t[name(TensorRole::kNormAttn)] = gaussian(1, d, 7);
  t[name(TensorRole::kNormAttn)].shape = {d};
  t[name(TensorRole::kNormMlp)] = gaussian(1, d, 8);
  t[name(TensorRole::kNormMlp)].shape = {d};
  t[name(TensorRole::kAttnQ)] = gaussian(d, d, 9);
  t[name(TensorRole::kAttnV)] = gaussian(32, d, 10);
  t[name(TensorRole::kMlpGate)] = gaussian(f, d, 11);
  t[name(TensorRole::kMlpUp)] = gaussian(f, d, 12);
  t[name(TensorRole::kMlpDown)] = gaussian(d, f, 13);
  t[name(TensorRole::kAttnO)] = gaussian(d, d, 14);
  const TensorMap before = t;
  ChannelScaleTransform tr(cfg, cs);
  ASSERT_TRUE(tr.apply_layer(0, t).ok());
  EXPECT_EQ(t[name(TensorRole::kAttnO)].data, before.at(name(TensorRole::kAttnO)).data);
  auto same_product = [&](TensorRole norm, TensorRole mat) {
    const auto &g0 = before.at(name(norm)).data, &g1 = t[name(norm)].data;
    const auto &w0 = before.at(name(mat)).data, &w1 = t[name(mat)].data;
    bool changed = false;
    for (size_t i = 0; i < w0.size(); ++i) {
      const size_t j = i % static_cast<size_t>(d);
      EXPECT_NEAR(g1[j] * w1[i], g0[j] * w0[i], 1e-5 * (std::abs(g0[j] * w0[i]) + 1e-6));
      changed |= w1[i] != w0[i];
    }
    EXPECT_TRUE(changed);
  };
  same_product(TensorRole::kNormAttn, TensorRole::kAttnQ);
  same_product(TensorRole::kNormAttn, TensorRole::kAttnV);
  same_product(TensorRole::kNormMlp, TensorRole::kMlpGate);
  // gate is scaled only on its input side: its rows are untouched by the down point.
  const auto &u0 = before.at(name(TensorRole::kMlpUp)).data, &u1 = t[name(TensorRole::kMlpUp)].data;
  const auto &dn0 = before.at(name(TensorRole::kMlpDown)).data,
             &dn1 = t[name(TensorRole::kMlpDown)].data;
  const auto& g1 = t[name(TensorRole::kNormMlp)].data;
  const auto& g0 = before.at(name(TensorRole::kNormMlp)).data;
  for (int64_t r = 0; r < f; ++r)
    for (int64_t c = 0; c < d; ++c) {  // up's row r read through the scaled norm
      const double want = u0[r * d + c] * g0[c],
                   got = u1[r * d + c] * g1[c] * cs.layers[0].scale[2][r];
      EXPECT_NEAR(got, want, 1e-5 * (std::abs(want) + 1e-6));
    }
  for (int64_t o = 0; o < d; ++o)
    for (int64_t r = 0; r < f; ++r)
      EXPECT_NEAR(dn1[o * f + r] / cs.layers[0].scale[2][r], dn0[o * f + r],
                  1e-6 * (std::abs(dn0[o * f + r]) + 1e-6));

  ModelConfig q35 = cfg;
  q35.family = Family::kQwen35;
  EXPECT_FALSE(check_channel_scalable(q35).ok());
  ModelConfig biased = cfg;
  biased.mlp_bias = true;
  EXPECT_FALSE(check_channel_scalable(biased).ok());
  EXPECT_TRUE(check_channel_scalable(cfg).ok());
}

}  // namespace
}  // namespace tq
