#include "convert/gptq_recovery.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

TEST(GptqRecovery, SampledLayersAreEvenlySpacedMidpoints) {
  EXPECT_EQ(recovery_layers(30, 6), (std::vector<int64_t>{2, 7, 12, 17, 22, 27}));
  EXPECT_EQ(recovery_layers(2, 6), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(recovery_layers(1, 6), (std::vector<int64_t>{0}));
  EXPECT_EQ(recovery_layers(24, 4), (std::vector<int64_t>{3, 9, 15, 21}));
  EXPECT_TRUE(recovery_layers(0, 6).empty());
}

TEST(GptqRecovery, FactorTakesTheNearestMeasuredWidthOfTheSameGrid) {
  GptqRecovery r;
  r.specs = {{QuantMode::kAffine, 2, 64}, {QuantMode::kAffine, 3, 64}, {QuantMode::kAffine, 4, 64}};
  r.factor[TensorRole::kMlpDown] = {0.5, 0.4, 0.3};
  const auto f = [&](TensorRole role, QuantMode mode, int bits, int group) {
    return r.factor_for(role, QuantSpec{mode, bits, group});
  };
  EXPECT_DOUBLE_EQ(f(TensorRole::kMlpDown, QuantMode::kAffine, 3, 64), 0.4);
  EXPECT_DOUBLE_EQ(f(TensorRole::kMlpDown, QuantMode::kAffine, 8, 64), 0.3);  // widest measured
  EXPECT_DOUBLE_EQ(f(TensorRole::kMlpDown, QuantMode::kAffine, 1, 64), 0.5);
  // Another group size, another mode or an unmeasured role: nothing is known, no correction.
  EXPECT_DOUBLE_EQ(f(TensorRole::kMlpDown, QuantMode::kAffine, 4, 32), 1.0);
  EXPECT_DOUBLE_EQ(f(TensorRole::kMlpDown, QuantMode::kMxfp4, 4, 32), 1.0);
  EXPECT_DOUBLE_EQ(f(TensorRole::kLmHead, QuantMode::kAffine, 4, 64), 1.0);
  const nlohmann::json j = r.to_json();
  EXPECT_DOUBLE_EQ(j["factor"]["mlp_down"]["affine 4-bit g64"].get<double>(), 0.3);
}

}  // namespace
}  // namespace tq
