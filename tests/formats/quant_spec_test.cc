#include "formats/quant_spec.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

TEST(QuantSpecTest, ModeNamesRoundTrip) {
  for (QuantMode m : {QuantMode::kAffine, QuantMode::kMxfp4, QuantMode::kNvfp4, QuantMode::kMxfp8})
    EXPECT_EQ(quant_mode_from_name(quant_mode_name(m)), m);
  EXPECT_EQ(quant_mode_name(QuantMode::kNvfp4), "nvfp4");
  EXPECT_FALSE(quant_mode_from_name("Affine").has_value());
  EXPECT_FALSE(quant_mode_from_name("fp4").has_value());
  EXPECT_FALSE(quant_mode_from_name("").has_value());
}

TEST(QuantSpecTest, DefaultsPerMode) {
  EXPECT_EQ(default_spec_for_mode(QuantMode::kAffine), (QuantSpec{QuantMode::kAffine, 4, 64}));
  EXPECT_EQ(default_spec_for_mode(QuantMode::kMxfp4), (QuantSpec{QuantMode::kMxfp4, 4, 32}));
  EXPECT_EQ(default_spec_for_mode(QuantMode::kNvfp4), (QuantSpec{QuantMode::kNvfp4, 4, 16}));
  EXPECT_EQ(default_spec_for_mode(QuantMode::kMxfp8), (QuantSpec{QuantMode::kMxfp8, 8, 32}));
  for (QuantMode m : {QuantMode::kAffine, QuantMode::kMxfp4, QuantMode::kNvfp4, QuantMode::kMxfp8})
    EXPECT_TRUE(validate_quant_spec(default_spec_for_mode(m)).ok());
}

TEST(QuantSpecTest, ValidatesAffineCombinations) {
  for (int bits = -1; bits <= 9; ++bits) {
    for (int g : {0, 16, 32, 48, 64, 128, 256}) {
      bool want = ((bits >= 1 && bits <= 6) || bits == 8) && (g == 32 || g == 64 || g == 128);
      Status st = validate_quant_spec({QuantMode::kAffine, bits, g});
      EXPECT_EQ(st.ok(), want) << bits << " bits g" << g;
    }
  }
  Status st = validate_quant_spec({QuantMode::kAffine, 7, 64});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("7 bits"), std::string::npos) << st.error().message;
}

TEST(QuantSpecTest, ValidatesFixedFloatModes) {
  EXPECT_FALSE(validate_quant_spec({QuantMode::kMxfp4, 4, 16}).ok());
  EXPECT_FALSE(validate_quant_spec({QuantMode::kMxfp4, 8, 32}).ok());
  EXPECT_FALSE(validate_quant_spec({QuantMode::kNvfp4, 4, 32}).ok());
  EXPECT_FALSE(validate_quant_spec({QuantMode::kMxfp8, 4, 32}).ok());
  EXPECT_FALSE(validate_quant_spec({QuantMode::kMxfp8, 8, 64}).ok());
  EXPECT_FALSE(validate_quant_spec({static_cast<QuantMode>(9), 4, 64}).ok());
  Status st = validate_quant_spec({QuantMode::kNvfp4, 4, 32});
  EXPECT_EQ(st.error().message, "nvfp4 quantization requires group size 16, got 32");
}

TEST(QuantSpecTest, SpecStrings) {
  EXPECT_EQ(quant_spec_str({QuantMode::kAffine, 4, 64}), "affine 4-bit g64");
  EXPECT_EQ(quant_spec_str({QuantMode::kAffine, 3, 128}), "affine 3-bit g128");
  EXPECT_EQ(quant_spec_str({QuantMode::kMxfp4, 4, 32}), "mxfp4");
  EXPECT_EQ(quant_spec_str({QuantMode::kNvfp4, 4, 16}), "nvfp4");
  EXPECT_EQ(quant_spec_str({QuantMode::kMxfp8, 8, 32}), "mxfp8");
  EXPECT_EQ(quant_spec_str({QuantMode::kMxfp4, 4, 64}), "mxfp4 4-bit g64");  // invalid, but shown
}

TEST(QuantSpecTest, BiasesOnlyForAffine) {
  EXPECT_TRUE(quant_mode_has_biases(QuantMode::kAffine));
  EXPECT_FALSE(quant_mode_has_biases(QuantMode::kMxfp4));
  EXPECT_FALSE(quant_mode_has_biases(QuantMode::kNvfp4));
  EXPECT_FALSE(quant_mode_has_biases(QuantMode::kMxfp8));
}

TEST(QuantSpecTest, BitsPerWeight) {
  EXPECT_DOUBLE_EQ(quant_bits_per_weight({QuantMode::kAffine, 4, 64}, 2), 4.5);
  EXPECT_DOUBLE_EQ(quant_bits_per_weight({QuantMode::kAffine, 4, 64}, 4), 5.0);
  EXPECT_DOUBLE_EQ(quant_bits_per_weight({QuantMode::kAffine, 3, 32}, 2), 4.0);
  EXPECT_DOUBLE_EQ(quant_bits_per_weight({QuantMode::kAffine, 8, 128}, 2), 8.25);
  EXPECT_DOUBLE_EQ(quant_bits_per_weight({QuantMode::kMxfp4, 4, 32}, 1), 4.25);
  EXPECT_DOUBLE_EQ(quant_bits_per_weight({QuantMode::kNvfp4, 4, 16}, 1), 4.5);
  EXPECT_DOUBLE_EQ(quant_bits_per_weight({QuantMode::kMxfp8, 8, 32}, 2), 8.25);  // ignores size
}

}  // namespace
}  // namespace tq
