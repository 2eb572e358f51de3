// Compares gptq_quantize and HessianAccumulator with the numpy reference GPTQ written by
// tests/oracle/test_gptq.py. Skipped unless TQ_GPTQ_FIXTURE_DIR names a fixture directory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../formats/fixture_reader.h"
#include "formats/mlx_quant.h"
#include "quant/gptq.h"
#include "quant/hessian.h"

namespace tq {
namespace {

template <typename T>
std::vector<T> as_vector(std::span<const uint8_t> b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

TEST(GptqOracle, MatchesNumpyReference) {
  auto fixture = testing::load_fixture("TQ_GPTQ_FIXTURE_DIR");
  if (!fixture) GTEST_SKIP() << "TQ_GPTQ_FIXTURE_DIR not set (run tests/oracle/test_gptq.py)";
  int cases = 0;
  for (const auto& c : fixture->meta.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const int64_t rows = c.at("rows"), cols = c.at("cols"), n = c.at("n");
    const QuantSpec spec{QuantMode::kAffine, c.at("bits").get<int>(),
                         c.at("group_size").get<int>()};
    auto dtype = dtype_from_name(c.at("dtype").get<std::string>());
    ASSERT_TRUE(dtype.has_value());
    auto x = as_vector<float>(fixture->bytes(c.at("x")));
    auto w = as_vector<float>(fixture->bytes(c.at("w")));
    auto h = as_vector<double>(fixture->bytes(c.at("h")));
    auto want_codes = as_vector<uint8_t>(fixture->bytes(c.at("codes")));
    auto want_q = as_vector<float>(fixture->bytes(c.at("q")));
    ASSERT_EQ(x.size(), static_cast<size_t>(n * cols));
    ASSERT_EQ(w.size(), static_cast<size_t>(rows * cols));
    ASSERT_EQ(h.size(), static_cast<size_t>(cols * cols));

    // Our Hessian of the same activations, in batches of 128 rows.
    HessianAccumulator acc(cols);
    for (int64_t r0 = 0; r0 < n; r0 += 128) {
      const int64_t m = std::min<int64_t>(128, n - r0);
      ASSERT_TRUE(acc.add({x.data() + r0 * cols, static_cast<size_t>(m * cols)}, m).ok());
    }
    auto ours_h = acc.hessian();
    double max_rel = 0.0, hmax = 0.0;
    for (double v : h) hmax = std::max(hmax, std::fabs(v));
    for (size_t i = 0; i < h.size(); ++i)
      max_rel = std::max(max_rel, std::fabs(ours_h[i] - h[i]) / hmax);
    EXPECT_LT(max_rel, 1e-6);

    GptqOptions opt;
    opt.block = c.at("block");
    opt.act_order = c.at("act_order");
    auto r = gptq_quantize(w, rows, cols, h, spec, *dtype, opt);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_FALSE(r->fallback);
    EXPECT_EQ(r->attempts, 1);
    const double loss = c.at("loss"), rtn_loss = c.at("rtn_loss");
    EXPECT_NEAR(r->proxy_loss, loss, 1e-4 * loss);
    EXPECT_NEAR(r->rtn_loss, rtn_loss, 1e-4 * rtn_loss);
    int64_t code_diffs = 0, q_diffs = 0;
    for (int64_t i = 0; i < rows * cols; ++i) {
      const auto* row = r->weight.data() + (i / cols) * (cols * spec.bits / 8);
      const uint32_t code = unpack_code(row, i % cols, spec.bits);
      if (code != want_codes[i] && code_diffs++ < 4)
        ADD_FAILURE() << "code [" << i / cols << ", " << i % cols << "]: tq " << code << ", numpy "
                      << int(want_codes[i]);
      q_diffs += f32_to_bits(r->dequantized[i]) != f32_to_bits(want_q[i]);
    }
    EXPECT_EQ(code_diffs, 0);
    EXPECT_EQ(q_diffs, 0);
    std::printf("%s: loss %.9g (numpy %.9g, rel diff %.2g), RTN %.6g\n", name.c_str(),
                r->proxy_loss, loss, std::fabs(r->proxy_loss - loss) / loss, r->rtn_loss);
    ++cases;
  }
  EXPECT_GT(cases, 0);
  std::printf("GptqOracle: compared %d cases\n", cases);
}

}  // namespace
}  // namespace tq
