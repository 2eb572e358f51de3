// Compares dequantize_ggml with gguf.quants.dequantize outputs recorded by
// tests/oracle/test_ggml_dequant.py. Skipped unless TQ_GGML_FIXTURE_DIR names a fixture.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fixture_reader.h"
#include "formats/ggml_blocks.h"
#include "tensor/dtype.h"

namespace tq {
namespace {

TEST(GgmlDequantOracle, TypeTableMatchesGguf) {
  auto fixture = testing::load_fixture("TQ_GGML_FIXTURE_DIR");
  if (!fixture)
    GTEST_SKIP() << "TQ_GGML_FIXTURE_DIR not set (run tests/oracle/test_ggml_dequant.py)";
  const auto& decodable = fixture->meta.at("decodable");
  for (const auto& t : fixture->meta.at("ggml_types")) {
    const std::string name = t.at("name");
    auto info = ggml_type_info(t.at("id").get<uint32_t>());
    ASSERT_TRUE(info.has_value()) << name;
    EXPECT_EQ(info->name, name);
    EXPECT_EQ(info->block_elems, t.at("block").get<int64_t>()) << name;
    // gguf-py 0.19 still lists Q8_1 with the old f32 d/s layout (40 bytes); ggml's block_q8_1
    // holds two f16 (36 bytes). Q8_1 only exists inside ggml's compute, never in files.
    if (name != "Q8_1") {
      EXPECT_EQ(info->block_bytes, t.at("size").get<int64_t>()) << name;
    }
    bool want = std::find(decodable.begin(), decodable.end(), name) != decodable.end();
    EXPECT_EQ(info->can_dequantize, want) << name;
  }
}

TEST(GgmlDequantOracle, MatchesGgufDequantizeBitForBit) {
  auto fixture = testing::load_fixture("TQ_GGML_FIXTURE_DIR");
  if (!fixture)
    GTEST_SKIP() << "TQ_GGML_FIXTURE_DIR not set (run tests/oracle/test_ggml_dequant.py)";
  int cases = 0;
  int64_t values = 0;
  for (const auto& c : fixture->meta.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const int64_t n = c.at("n");
    auto expected = fixture->bytes(c.at("expected"));
    ASSERT_EQ(expected.size(), static_cast<size_t>(n) * 4);
    std::vector<float> out(static_cast<size_t>(n));
    Status st = dequantize_ggml(c.at("type").get<uint32_t>(), fixture->bytes(c.at("data")), n, out);
    ASSERT_TRUE(st.ok()) << st.error().message;
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      float want;
      std::memcpy(&want, expected.data() + 4 * i, 4);
      if (std::isnan(want) && std::isnan(out[i])) continue;  // numpy may quiet NaN payloads
      if (f32_to_bits(want) == f32_to_bits(out[i])) continue;
      if (mismatches++ < 5)
        ADD_FAILURE() << "element " << i << ": tq " << out[i] << " (0x" << std::hex
                      << f32_to_bits(out[i]) << "), gguf " << want << " (0x" << f32_to_bits(want)
                      << std::dec << ")";
    }
    EXPECT_EQ(mismatches, 0);
    values += n;
    ++cases;
  }
  EXPECT_GT(cases, 0);
  std::printf("GgmlDequantOracle: compared %d cases, %lld values\n", cases,
              static_cast<long long>(values));
}

}  // namespace
}  // namespace tq
