// Compares dequantize_mlx with mx.dequantize outputs recorded by tests/oracle/test_mlx_dequant.py.
// Skipped unless TQ_MLX_FIXTURE_DIR names a fixture directory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fixture_reader.h"
#include "formats/mlx_quant.h"

namespace tq {
namespace {

// mx.dequantize output element i (raw bits of out_dtype) widened to f32.
float expected_at(DType t, std::span<const uint8_t> b, size_t i) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, b.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, b.data() + 2 * i, 2);
  return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

TEST(MlxDequantOracle, MatchesMxDequantizeBitForBit) {
  auto fixture = testing::load_fixture("TQ_MLX_FIXTURE_DIR");
  if (!fixture) GTEST_SKIP() << "TQ_MLX_FIXTURE_DIR not set (run tests/oracle/test_mlx_dequant.py)";
  int cases = 0;
  int64_t values = 0, nan_payload_diffs = 0;
  for (const auto& c : fixture->meta.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    auto mode = quant_mode_from_name(c.at("mode").get<std::string>());
    ASSERT_TRUE(mode.has_value());
    QuantSpec spec{*mode, c.at("bits").get<int>(), c.at("group_size").get<int>()};
    int64_t rows = c.at("rows"), cols = c.at("cols");
    auto scale_dtype = dtype_from_name(c.at("scale_dtype").get<std::string>());
    auto out_dtype = dtype_from_name(c.at("out_dtype").get<std::string>());
    ASSERT_TRUE(scale_dtype && out_dtype);
    auto expected = fixture->bytes(c.at("expected"));
    ASSERT_EQ(expected.size(), static_cast<size_t>(rows * cols) * dtype_size(*out_dtype));

    std::vector<float> out(static_cast<size_t>(rows * cols));
    Status st = dequantize_mlx(spec, rows, cols, fixture->bytes(c.at("weight")), *scale_dtype,
                               fixture->bytes(c.at("scales")), fixture->bytes(c.at("biases")), out);
    ASSERT_TRUE(st.ok()) << st.error().message;
    int shown = 0;
    int64_t mismatches = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      float want = expected_at(*out_dtype, expected, i);
      if (std::isnan(want) && std::isnan(out[i])) {
        nan_payload_diffs += f32_to_bits(want) != f32_to_bits(out[i]);
        continue;
      }
      if (f32_to_bits(want) == f32_to_bits(out[i])) continue;
      ++mismatches;
      if (shown++ < 5)
        ADD_FAILURE() << "element " << i << " (row " << i / cols << ", col " << i % cols << "): tq "
                      << out[i] << " (0x" << std::hex << f32_to_bits(out[i]) << "), mlx " << want
                      << " (0x" << f32_to_bits(want) << std::dec << ")";
    }
    EXPECT_EQ(mismatches, 0);
    values += static_cast<int64_t>(out.size());
    ++cases;
  }
  EXPECT_GT(cases, 0);
  std::printf("MlxDequantOracle: compared %d cases, %lld values, %lld NaNs with other payloads\n",
              cases, static_cast<long long>(values), static_cast<long long>(nan_payload_diffs));
}

}  // namespace
}  // namespace tq
