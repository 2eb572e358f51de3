// Searched affine grids and the post-GPTQ least-squares refit: never worse than mx.quantize's
// grid in the error they minimise, clearly better on Gaussian groups, and the packed tensors
// still decode (dequantize_mlx) to the values the losses were computed on.
#include "quant/grid_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "formats/mlx_encode.h"
#include "formats/mlx_float.h"
#include "formats/mlx_quant.h"
#include "quant/gptq.h"
#include "quant/grid_refit.h"
#include "quant/hessian.h"

namespace tq {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float sd, DType dtype) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to_dtype(nd(rng), dtype);
  return v;
}

TEST(GridSearch, NeverWorseThanMinMaxAndBetterOnAverage) {
  for (int bits : {2, 3, 4, 8}) {
    double e_minmax = 0, e_search = 0;
    for (uint32_t seed = 0; seed < 200; ++seed) {
      const auto w = gaussian(64, seed, 0.02f, DType::kBF16);
      std::vector<float> d = gaussian(64, seed + 1000, 1.0f, DType::kF32);
      for (auto& x : d) x = x * x;  // Hessian-diagonal-like weights
      for (bool weighted : {false, true}) {
        std::span<const float> dw = weighted ? std::span<const float>(d) : std::span<const float>();
        const AffineGrid mm = affine_grid(w, bits, DType::kBF16);
        const double e0 = affine_group_error(w, dw, mm.stored_scale, mm.stored_bias, bits);
        const StoredAffine s = search_affine_grid(w, dw, bits, DType::kBF16);
        const double e1 = affine_group_error(w, dw, s.scale, s.bias, bits);
        ASSERT_LE(e1, e0) << bits << "-bit seed " << seed;
        EXPECT_EQ(s.scale, round_to_dtype(s.scale, DType::kBF16));  // storable as is
        EXPECT_EQ(s.bias, round_to_dtype(s.bias, DType::kBF16));
        if (!weighted) {
          e_minmax += e0;
          e_search += e1;
        }
      }
    }
    // Gaussian groups: clipping the tails pays, most at low widths.
    if (bits <= 4) {
      EXPECT_LT(e_search, 0.85 * e_minmax) << bits << "-bit";
    }
  }
}

TEST(GridSearch, RtnSearchDecodesAndLowersWeightError) {
  const int64_t rows = 16, cols = 128;
  const auto w = gaussian(rows * cols, 7, 0.03f, DType::kBF16);
  const QuantSpec spec{QuantMode::kAffine, 3, 64};
  auto mm = rtn_quantize(w, rows, cols, spec, DType::kBF16);
  auto se = rtn_quantize(w, rows, cols, spec, DType::kBF16, GridChoice::kSearch);
  ASSERT_TRUE(mm.ok() && se.ok());
  std::vector<float> out(w.size());
  ASSERT_TRUE(
      dequantize_mlx(spec, rows, cols, se->weight, DType::kBF16, se->scales, se->biases, out).ok());
  double e0 = 0, e1 = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(f32_to_bits(out[i]), f32_to_bits(se->dequantized[i]));
    e0 += std::pow(double{w[i]} - mm->dequantized[i], 2);
    e1 += std::pow(double{w[i]} - se->dequantized[i], 2);
  }
  EXPECT_LT(e1, 0.9 * e0);
}

// H from correlated inputs whose columns have very different scales.
std::vector<double> hessian(int64_t cols, uint32_t seed) {
  const int64_t n = 400;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> scale(static_cast<size_t>(cols)), x(static_cast<size_t>(n * cols));
  for (auto& s : scale) s = 0.2f + 2.0f * std::fabs(nd(rng));
  for (int64_t i = 0; i < n; ++i) {
    const float z = nd(rng);
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = (0.6f * z + nd(rng)) * scale[j];
  }
  HessianAccumulator acc(cols);
  EXPECT_TRUE(acc.add(x, n).ok());
  return acc.hessian();
}

TEST(GridRefit, LowersTheHessianErrorOfFixedCodes) {
  const int64_t rows = 24, cols = 128;
  const auto w = gaussian(rows * cols, 3, 0.03f, DType::kBF16);
  const auto h = hessian(cols, 5);
  const QuantSpec spec{QuantMode::kAffine, 3, 32};
  const GroupCoder coder(spec, DType::kBF16);
  std::vector<GroupGrid> grids;
  std::vector<uint8_t> codes(w.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols / 32; ++g) {
      grids.push_back(coder.fit({w.data() + r * cols + g * 32, 32}));
      for (int64_t k = 0; k < 32; ++k)
        codes[r * cols + g * 32 + k] = coder.code(w[r * cols + g * 32 + k], grids.back());
    }
  auto st = refit_affine_grids(coder, w, rows, cols, h, codes, &grids);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_GT(st->rows_refit, rows / 2);
  EXPECT_LT(st->loss_after, 0.95 * st->loss_before);
  // The reported loss is the loss of the grids left in place.
  std::vector<float> q(w.size());
  for (int64_t i = 0; i < rows * cols; ++i)
    q[i] = coder.value(codes[i], grids[(i / cols) * (cols / 32) + (i % cols) / 32]);
  EXPECT_NEAR(gptq_proxy_loss(w, q, rows, cols, h), st->loss_after, 1e-9 * st->loss_before);
}

TEST(GridRefit, GptqWithSearchAndRefitDecodesAndBeatsItsSweep) {
  const int64_t rows = 32, cols = 128;
  const auto w = gaussian(rows * cols, 11, 0.03f, DType::kBF16);
  const auto h = hessian(cols, 13);
  for (int bits : {3, 4}) {
    const QuantSpec spec{QuantMode::kAffine, bits, 64};
    GptqOptions base, opt;
    opt.grid = GridChoice::kSearch;
    opt.refit = true;
    auto a = gptq_quantize(w, rows, cols, h, spec, DType::kBF16, base);
    auto b = gptq_quantize(w, rows, cols, h, spec, DType::kBF16, opt);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_FALSE(b->fallback);
    EXPECT_LE(b->proxy_loss, b->sweep_loss);
    EXPECT_GT(b->refit_rows, 0);
    EXPECT_LT(b->proxy_loss, a->proxy_loss) << bits << "-bit";
    std::vector<float> out(w.size());
    ASSERT_TRUE(
        dequantize_mlx(spec, rows, cols, b->weight, DType::kBF16, b->scales, b->biases, out).ok());
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(f32_to_bits(out[i]), f32_to_bits(b->dequantized[i]));
  }
}

}  // namespace
}  // namespace tq
