// GPTQ on synthetic layers: proxy loss vs RTN, rank-deficient Hessians, every bit width, the
// packed tensors decoding to the Q of the loss, and the damping/divergence guards.
#include "quant/gptq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "formats/mlx_float.h"
#include "formats/mlx_quant.h"
#include "quant/hessian.h"

namespace tq {
namespace {

// Correlated activations X [n, cols]: a few shared latent factors plus per-column noise whose
// scale varies by column (as real layer inputs do), and optional dead (all-zero) columns.
std::vector<float> activations(int64_t n, int64_t cols, uint32_t seed, int dead_every = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t k = 8;
  std::vector<float> mix(static_cast<size_t>(k * cols)), scale(static_cast<size_t>(cols));
  for (auto& m : mix) m = nd(rng);
  for (int64_t j = 0; j < cols; ++j) scale[j] = 0.2f + 2.0f * std::fabs(nd(rng));
  std::vector<float> x(static_cast<size_t>(n * cols));
  std::vector<float> z(k);
  for (int64_t i = 0; i < n; ++i) {
    for (auto& v : z) v = nd(rng);
    for (int64_t j = 0; j < cols; ++j) {
      float v = 0.5f * nd(rng);
      for (int64_t f = 0; f < k; ++f) v += z[f] * mix[f * cols + j];
      x[i * cols + j] = (dead_every > 0 && j % dead_every == 3) ? 0.0f : v * scale[j];
    }
  }
  return x;
}

std::vector<float> weights(int64_t rows, int64_t cols, uint32_t seed, DType dtype) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = round_to_dtype(nd(rng), dtype);
  return w;
}

std::vector<double> hessian_of(const std::vector<float>& x, int64_t cols) {
  HessianAccumulator acc(cols);
  const int64_t n = static_cast<int64_t>(x.size()) / cols;
  for (int64_t r0 = 0; r0 < n; r0 += 100) {  // uneven batches
    const int64_t m = std::min<int64_t>(100, n - r0);
    EXPECT_TRUE(acc.add({x.data() + r0 * cols, static_cast<size_t>(m * cols)}, m).ok());
  }
  return acc.hessian();
}

// The packed tensors decode to result.dequantized, bit for bit.
void expect_decodes(const GptqResult& r, const QuantSpec& spec, DType dtype, int64_t rows,
                    int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const DType sd = spec.mode == QuantMode::kAffine ? dtype : DType::kU8;
  Status st = dequantize_mlx(spec, rows, cols, r.weight, sd, r.scales, r.biases, out);
  ASSERT_TRUE(st.ok()) << st.error().message;
  ASSERT_EQ(out.size(), r.dequantized.size());
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i)
    bad += f32_to_bits(out[i]) != f32_to_bits(r.dequantized[i]);
  EXPECT_EQ(bad, 0);
  std::vector<float> w(static_cast<size_t>(rows * cols), 0.0f);
}

TEST(Hessian, MatchesNaiveSumInBothPrecisions) {
  const int64_t n = 300, cols = 48;
  auto x = activations(n, cols, 1);
  for (HessianPrecision p : {HessianPrecision::kF64, HessianPrecision::kF32Batch}) {
    HessianAccumulator acc(cols, p);
    ASSERT_TRUE(acc.add({x.data(), static_cast<size_t>(100 * cols)}, 100).ok());
    ASSERT_TRUE(acc.add({x.data() + 100 * cols, static_cast<size_t>(200 * cols)}, 200).ok());
    EXPECT_EQ(acc.samples(), n);
    auto h = acc.hessian();
    // Errors relative to the largest entry (f32 batches round each product sum to 24 bits).
    double max_err = 0.0, hmax = 0.0;
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        double s = 0.0;
        for (int64_t t = 0; t < n; ++t) s += double(x[t * cols + i]) * double(x[t * cols + j]);
        const double want = 2.0 * s / double(n);
        hmax = std::max(hmax, std::fabs(want));
        max_err = std::max(max_err, std::fabs(h[i * cols + j] - want));
        EXPECT_EQ(h[i * cols + j], h[j * cols + i]);
      }
    const double max_rel = max_err / hmax;
    EXPECT_LT(max_rel, p == HessianPrecision::kF64 ? 1e-14 : 1e-6);
  }
  HessianAccumulator acc(4);
  std::vector<float> bad = {1, 2, NAN, 4};
  EXPECT_FALSE(acc.add(bad, 1).ok());
  EXPECT_FALSE(acc.add(bad, 2).ok());  // size mismatch
}

TEST(Gptq, BeatsRtnOnCorrelatedLayer) {
  const int64_t rows = 64, cols = 256;
  auto w = weights(rows, cols, 2, DType::kBF16);
  auto h = hessian_of(activations(1024, cols, 3), cols);
  const QuantSpec spec{QuantMode::kAffine, 4, 64};
  auto r = gptq_quantize(w, rows, cols, h, spec, DType::kBF16);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->fallback);
  EXPECT_EQ(r->attempts, 1);
  EXPECT_DOUBLE_EQ(r->damp, 0.01);
  EXPECT_GT(r->rtn_loss, 0.0);
  EXPECT_LT(r->proxy_loss, 0.8 * r->rtn_loss) << r->proxy_loss << " vs RTN " << r->rtn_loss;
  EXPECT_NEAR(r->proxy_loss, gptq_proxy_loss(w, r->dequantized, rows, cols, h),
              1e-9 * r->proxy_loss);
  expect_decodes(*r, spec, DType::kBF16, rows, cols);
  EXPECT_EQ(r->weight.size(), static_cast<size_t>(rows * cols / 8 * 4));
  EXPECT_EQ(r->scales.size(), static_cast<size_t>(rows * cols / 64 * 2));
  EXPECT_EQ(r->biases.size(), r->scales.size());
}

TEST(Gptq, EveryAffineWidthAndGroup) {
  const int64_t rows = 32, cols = 256;
  auto x = activations(600, cols, 4);
  auto h = hessian_of(x, cols);
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int g : {32, 64, 128})
      for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
        SCOPED_TRACE(testing::Message() << bits << "-bit g" << g << " " << dtype_name(dt));
        auto w = weights(rows, cols, 5 + bits, dt);
        const QuantSpec spec{QuantMode::kAffine, bits, g};
        auto r = gptq_quantize(w, rows, cols, h, spec, dt);
        ASSERT_TRUE(r.ok()) << r.error().message;
        EXPECT_LE(r->proxy_loss, r->rtn_loss);
        if (bits <= 6) {
          EXPECT_FALSE(r->fallback);
          EXPECT_LT(r->proxy_loss, 0.95 * r->rtn_loss);
        }
        expect_decodes(*r, spec, dt, rows, cols);
      }
}

TEST(Gptq, FpModes) {
  const int64_t rows = 32, cols = 128;
  auto h = hessian_of(activations(600, cols, 6), cols);
  for (QuantSpec spec : {QuantSpec{QuantMode::kMxfp4, 4, 32}, QuantSpec{QuantMode::kNvfp4, 4, 16},
                         QuantSpec{QuantMode::kMxfp8, 8, 32}}) {
    SCOPED_TRACE(quant_spec_str(spec));
    auto w = weights(rows, cols, 7, DType::kBF16);
    auto r = gptq_quantize(w, rows, cols, h, spec, DType::kBF16);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_FALSE(r->fallback);
    EXPECT_LT(r->proxy_loss, r->rtn_loss);
    EXPECT_TRUE(r->biases.empty());
    EXPECT_EQ(r->scales.size(), static_cast<size_t>(rows * cols / spec.group_size));
    expect_decodes(*r, spec, DType::kBF16, rows, cols);
  }
}

TEST(Gptq, ActOrderUsesStaticGroupsOfTheOriginalColumns) {
  const int64_t rows = 48, cols = 256;
  auto w = weights(rows, cols, 8, DType::kBF16);
  auto h = hessian_of(activations(800, cols, 9), cols);
  const QuantSpec spec{QuantMode::kAffine, 3, 32};
  GptqOptions opt;
  opt.act_order = true;
  auto r = gptq_quantize(w, rows, cols, h, spec, DType::kBF16, opt);
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto rtn = rtn_quantize(w, rows, cols, spec, DType::kBF16);
  ASSERT_TRUE(rtn.ok());
  // MLX has no g_idx: the grids are RTN's grids of W, fixed before the permuted sweep.
  EXPECT_EQ(r->scales, rtn->scales);
  EXPECT_EQ(r->biases, rtn->biases);
  EXPECT_FALSE(r->fallback);
  EXPECT_LT(r->proxy_loss, r->rtn_loss);
  expect_decodes(*r, spec, DType::kBF16, rows, cols);
}

TEST(Gptq, RankDeficientHessianWithDeadColumns) {
  // 24 calibration rows for 512 columns, every 16th column dead: H has rank <= 24.
  const int64_t rows = 64, cols = 512;
  auto x = activations(24, cols, 10, 16);
  auto h = hessian_of(x, cols);
  for (int bits : {2, 3, 4, 6}) {
    SCOPED_TRACE(bits);
    auto w = weights(rows, cols, 11, DType::kBF16);
    const QuantSpec spec{QuantMode::kAffine, bits, 64};
    for (bool act : {false, true}) {
      GptqOptions opt;
      opt.act_order = act;
      auto r = gptq_quantize(w, rows, cols, h, spec, DType::kBF16, opt);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(r->dead_columns, cols / 16);
      EXPECT_TRUE(std::isfinite(r->proxy_loss));
      EXPECT_LE(r->proxy_loss, r->rtn_loss);
      for (float v : r->dequantized) ASSERT_TRUE(std::isfinite(v));
      expect_decodes(*r, spec, DType::kBF16, rows, cols);
      if (!r->fallback) {  // dead columns are quantized from zero
        for (int64_t i = 0; i < rows; ++i)
          EXPECT_LE(std::fabs(r->dequantized[i * cols + 3]), 0.02f) << i;
      }
    }
  }
}

TEST(Gptq, IndefiniteHessianEscalatesDamping) {
  // 2x2 blocks [[1, 3], [3, 1]] (eigenvalues 4 and -2): Cholesky fails until λ > 2·mean(diag).
  const int64_t rows = 16, cols = 64;
  std::vector<double> h(static_cast<size_t>(cols * cols), 0.0);
  for (int64_t i = 0; i < cols; i += 2) {
    h[i * cols + i] = h[(i + 1) * cols + i + 1] = 1.0;
    h[i * cols + i + 1] = h[(i + 1) * cols + i] = 3.0;
  }
  auto w = weights(rows, cols, 12, DType::kF32);
  auto r = gptq_quantize(w, rows, cols, h, {QuantMode::kAffine, 4, 32}, DType::kF32);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->cholesky_failures, 3);
  EXPECT_LE(r->proxy_loss, r->rtn_loss);
  if (!r->fallback) {
    EXPECT_DOUBLE_EQ(r->damp, 10.0);
  }
  EXPECT_EQ(r->attempts, 4);
}

TEST(Gptq, ScaleGuardFallsBackToRtn) {
  const int64_t rows = 32, cols = 128;
  auto w = weights(rows, cols, 13, DType::kBF16);
  auto h = hessian_of(activations(400, cols, 14), cols);
  const QuantSpec spec{QuantMode::kAffine, 4, 32};
  GptqOptions opt;
  opt.scale_guard = 0.5;  // below RTN's own largest scale: every sweep "diverges"
  auto r = gptq_quantize(w, rows, cols, h, spec, DType::kBF16, opt);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->fallback);
  EXPECT_EQ(r->attempts, 4);  // 0.01, 0.1, 1, 10
  EXPECT_EQ(r->scale_divergences, 4);
  EXPECT_EQ(r->proxy_loss, r->rtn_loss);
  auto rtn = rtn_quantize(w, rows, cols, spec, DType::kBF16);
  ASSERT_TRUE(rtn.ok());
  EXPECT_EQ(r->weight, rtn->weight);
  EXPECT_EQ(r->scales, rtn->scales);
  EXPECT_EQ(r->biases, rtn->biases);
}

TEST(Gptq, NearlySingularHessianNeverWorseThanRtn) {
  // Rank-4 Hessian plus 1e-9 of identity, almost no damping: the sweep amplifies errors along
  // the null space; the guards must still return something no worse than RTN.
  const int64_t rows = 32, cols = 256;
  auto x = activations(4, cols, 15);
  auto h = hessian_of(x, cols);
  for (int64_t i = 0; i < cols; ++i) h[i * cols + i] += 1e-9;
  auto w = weights(rows, cols, 16, DType::kBF16);
  GptqOptions opt;
  opt.damp = 1e-8;
  auto r = gptq_quantize(w, rows, cols, h, {QuantMode::kAffine, 3, 64}, DType::kBF16, opt);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_LE(r->proxy_loss, r->rtn_loss);
  EXPECT_GE(r->attempts, 1);
  std::printf("nearly singular: attempts %d chol %d scale %d loss %d damp %g fallback %d\n",
              r->attempts, r->cholesky_failures, r->scale_divergences, r->loss_divergences, r->damp,
              r->fallback);
}

TEST(Gptq, RejectsBadInput) {
  const int64_t rows = 4, cols = 64;
  std::vector<float> w(static_cast<size_t>(rows * cols), 0.01f);
  std::vector<double> h(static_cast<size_t>(cols * cols), 0.0);
  for (int64_t i = 0; i < cols; ++i) h[i * cols + i] = 1.0;
  const QuantSpec spec{QuantMode::kAffine, 4, 64};
  EXPECT_TRUE(gptq_quantize(w, rows, cols, h, spec, DType::kF32).ok());
  EXPECT_FALSE(gptq_quantize(w, rows, cols, h, {QuantMode::kAffine, 7, 64}, DType::kF32).ok());
  EXPECT_FALSE(gptq_quantize(w, rows, cols, h, spec, DType::kU8).ok());
  EXPECT_FALSE(gptq_quantize(w, rows, 32, h, spec, DType::kF32).ok());  // cols % group
  EXPECT_FALSE(gptq_quantize({w.data(), 10}, rows, cols, h, spec, DType::kF32).ok());
  EXPECT_FALSE(gptq_quantize(w, rows, cols, {h.data(), 10}, spec, DType::kF32).ok());
  auto hn = h;
  hn[5] = NAN;
  EXPECT_FALSE(gptq_quantize(w, rows, cols, hn, spec, DType::kF32).ok());
  auto hneg = h;
  hneg[0] = -1.0;
  EXPECT_FALSE(gptq_quantize(w, rows, cols, hneg, spec, DType::kF32).ok());
  auto wn = w;
  wn[3] = INFINITY;
  EXPECT_FALSE(gptq_quantize(wn, rows, cols, h, spec, DType::kF32).ok());
  GptqOptions bad;
  bad.damp = 0.0;
  EXPECT_FALSE(gptq_quantize(w, rows, cols, h, spec, DType::kF32, bad).ok());
  // An all-zero Hessian (no calibration signal): every column dead; RTN, not zeroed weights.
  std::vector<double> hz(h.size(), 0.0);
  auto r = gptq_quantize(w, rows, cols, hz, spec, DType::kF32);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->dead_columns, cols);
  EXPECT_TRUE(r->fallback);
  EXPECT_EQ(r->proxy_loss, 0.0);
  EXPECT_NEAR(r->dequantized[0], 0.01f, 1e-3f);
}

}  // namespace
}  // namespace tq
