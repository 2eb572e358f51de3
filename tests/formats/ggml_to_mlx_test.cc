#include "formats/ggml_to_mlx.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "formats/ggml_blocks.h"
#include "kernels/packed_matrix.h"
#include "tensor/dtype.h"

namespace tq {
namespace {

// Random blocks of `t` with finite f16 scales (and E8M0 exponents near 1 for MXFP4).
std::vector<uint8_t> random_blocks(GgmlType t, int64_t blocks, std::mt19937& rng) {
  const auto info = *ggml_type_info(static_cast<uint32_t>(t));
  std::vector<uint8_t> b(static_cast<size_t>(blocks * info.block_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> val(-0.05f, 0.05f);
  for (auto& x : b) x = static_cast<uint8_t>(byte(rng));
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* p = b.data() + i * info.block_bytes;
    auto put = [&](int off) {
      const uint16_t h = f32_to_f16(val(rng));
      p[off] = static_cast<uint8_t>(h & 0xFF), p[off + 1] = static_cast<uint8_t>(h >> 8);
    };
    if (t == GgmlType::kMXFP4) {
      p[0] = static_cast<uint8_t>(110 + byte(rng) % 30);
      continue;
    }
    put(0);
    if (t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1) put(2);
  }
  return b;
}

TEST(GgmlToMlx, EveryWeightEqualsTheGgmlDecoding) {
  std::mt19937 rng(7);
  const int64_t rows = 5, cols = 96;
  for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                     GgmlType::kQ8_0, GgmlType::kMXFP4}) {
    const auto id = static_cast<uint32_t>(t);
    SCOPED_TRACE(ggml_type_info(id)->name);
    const auto src = random_blocks(t, rows * cols / 32, rng);
    std::vector<float> want(static_cast<size_t>(rows * cols));
    ASSERT_TRUE(dequantize_ggml(id, src, rows * cols, want).ok());
    auto q = ggml_to_mlx(id, src, rows, cols);
    ASSERT_TRUE(q.ok()) << q.error().message;
    ASSERT_EQ(q->spec, *ggml_mlx_spec(id));
    auto m =
        make_quant_matrix(q->spec, rows, cols, q->weight, q->scale_dtype, q->scales, q->biases);
    ASSERT_TRUE(m.ok()) << m.error().message;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k)
        ASSERT_EQ(packed_weight(*m, r, k), want[static_cast<size_t>(r * cols + k)])
            << "row " << r << " col " << k;
  }
}

TEST(GgmlToMlx, RefusesWhatIsNotExact) {
  std::vector<uint8_t> blocks(144);
  EXPECT_FALSE(ggml_mlx_spec(static_cast<uint32_t>(GgmlType::kQ4_K)).has_value());
  EXPECT_FALSE(ggml_to_mlx(static_cast<uint32_t>(GgmlType::kQ4_K), blocks, 1, 256).ok());
  // Wrong byte count, and columns that are not whole blocks.
  EXPECT_FALSE(ggml_to_mlx(static_cast<uint32_t>(GgmlType::kQ4_0), blocks, 1, 32).ok());
  EXPECT_FALSE(ggml_to_mlx(static_cast<uint32_t>(GgmlType::kQ4_0), blocks, 8, 17).ok());
  // A Q8_0 scale whose bias -128·d overflows f16.
  std::vector<uint8_t> q8(34, 0);
  const uint16_t big = f32_to_f16(60000.0f);
  q8[0] = static_cast<uint8_t>(big & 0xFF), q8[1] = static_cast<uint8_t>(big >> 8);
  EXPECT_FALSE(ggml_to_mlx(static_cast<uint32_t>(GgmlType::kQ8_0), q8, 1, 32).ok());
}

}  // namespace
}  // namespace tq
