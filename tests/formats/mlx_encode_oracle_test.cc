// Compares quantize_mlx with mx.quantize outputs recorded by tests/oracle/test_mlx_quantize.py,
// and dequantize_mlx of our output with mx.dequantize of MLX's. Skipped unless
// TQ_MLX_ENCODE_FIXTURE_DIR names a fixture directory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fixture_reader.h"
#include "formats/mlx_encode.h"
#include "formats/mlx_quant.h"

namespace tq {
namespace {

// Element i of raw little-endian values of dtype t, widened to f32.
float value_at(DType t, std::span<const uint8_t> b, size_t i) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, b.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, b.data() + 2 * i, 2);
  return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// Counts differing bytes and reports the first few with their element index.
int64_t compare_bytes(const char* what, std::span<const uint8_t> want,
                      const std::vector<uint8_t>& got, size_t elem_size) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return 1;
  int64_t diffs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (diffs++ < 4)
      ADD_FAILURE() << what << " byte " << i << " (element " << i / elem_size << "): tq 0x"
                    << std::hex << int(got[i]) << ", mlx 0x" << int(want[i]) << std::dec;
  }
  return diffs;
}

TEST(MlxQuantizeOracle, MatchesMxQuantizeBitForBit) {
  auto fixture = testing::load_fixture("TQ_MLX_ENCODE_FIXTURE_DIR");
  if (!fixture)
    GTEST_SKIP() << "TQ_MLX_ENCODE_FIXTURE_DIR not set (run tests/oracle/test_mlx_quantize.py)";
  int cases = 0;
  int64_t values = 0;
  for (const auto& c : fixture->meta.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    auto mode = quant_mode_from_name(c.at("mode").get<std::string>());
    ASSERT_TRUE(mode.has_value());
    QuantSpec spec{*mode, c.at("bits").get<int>(), c.at("group_size").get<int>()};
    int64_t rows = c.at("rows"), cols = c.at("cols");
    auto dtype = dtype_from_name(c.at("dtype").get<std::string>());
    auto out_dtype = dtype_from_name(c.at("out_dtype").get<std::string>());
    ASSERT_TRUE(dtype && out_dtype);
    auto in = fixture->bytes(c.at("input"));
    ASSERT_EQ(in.size(), static_cast<size_t>(rows * cols) * 4);
    std::vector<float> w(static_cast<size_t>(rows * cols));
    std::memcpy(w.data(), in.data(), in.size());

    std::vector<uint8_t> weight, scales, biases;
    Status st = quantize_mlx(spec, rows, cols, w, *dtype, &weight, &scales, &biases);
    ASSERT_TRUE(st.ok()) << st.error().message;
    const size_t ssize = spec.mode == QuantMode::kAffine ? dtype_size(*dtype) : 1;
    int64_t diffs = compare_bytes("weight", fixture->bytes(c.at("weight")), weight, 4) +
                    compare_bytes("scales", fixture->bytes(c.at("scales")), scales, ssize);
    if (spec.mode == QuantMode::kAffine)
      diffs += compare_bytes("biases", fixture->bytes(c.at("biases")), biases, ssize);
    else
      EXPECT_TRUE(biases.empty());
    EXPECT_EQ(diffs, 0);

    // Our decoder on our encoding reproduces mx.dequantize(mx.quantize(w)).
    std::vector<float> out(w.size());
    const DType scale_dtype = spec.mode == QuantMode::kAffine ? *dtype : DType::kU8;
    st = dequantize_mlx(spec, rows, cols, weight, scale_dtype, scales, biases, out);
    ASSERT_TRUE(st.ok()) << st.error().message;
    auto expected = fixture->bytes(c.at("dequantized"));
    ASSERT_EQ(expected.size(), out.size() * dtype_size(*out_dtype));
    int64_t mismatches = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      float want = value_at(*out_dtype, expected, i);
      if ((std::isnan(want) && std::isnan(out[i])) || f32_to_bits(want) == f32_to_bits(out[i]))
        continue;
      if (mismatches++ < 4)
        ADD_FAILURE() << "dequantized element " << i << ": tq " << out[i] << ", mlx " << want;
    }
    EXPECT_EQ(mismatches, 0);
    values += static_cast<int64_t>(w.size());
    ++cases;
  }
  EXPECT_GT(cases, 0);
  std::printf("MlxQuantizeOracle: compared %d cases, %lld values\n", cases,
              static_cast<long long>(values));
}

}  // namespace
}  // namespace tq
