#include "recipe/allocate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace tq {
namespace {

QuantSpec affine(int bits, int group = 64) { return {QuantMode::kAffine, bits, group}; }

// Brute force over every combination: the least summed KL within `budget_bytes` (modules only).
double brute_force(const std::vector<AllocModule>& mods, uint64_t budget_bytes) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<size_t> idx(mods.size(), 0);
  while (true) {
    uint64_t bytes = 0;
    double kl = 0;
    for (size_t m = 0; m < mods.size(); ++m) {
      bytes += mods[m].options[idx[m]].bytes;
      kl += mods[m].options[idx[m]].kl;
    }
    if (bytes <= budget_bytes) best = std::min(best, kl);
    size_t m = 0;
    while (m < mods.size() && ++idx[m] == mods[m].options.size()) idx[m++] = 0;
    if (m == mods.size()) break;
  }
  return best;
}

std::vector<AllocModule> random_table(std::mt19937& rng, int n_modules, int n_options) {
  std::uniform_int_distribution<int> bytes_d(1, 2000);
  std::uniform_real_distribution<double> kl_d(0.0, 1.0);
  std::vector<AllocModule> mods;
  for (int m = 0; m < n_modules; ++m) {
    AllocModule mod;
    mod.name = "m" + std::to_string(m);
    mod.params = 4096;
    for (int k = 0; k < n_options; ++k)
      mod.options.push_back({affine(2 + k), kl_d(rng), static_cast<uint64_t>(bytes_d(rng))});
    mods.push_back(mod);
  }
  return mods;
}

TEST(Allocate, MatchesBruteForceOnRandomTables) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + trial % 5, k = 2 + trial % 4;
    std::vector<AllocModule> mods = random_table(rng, n, k);
    uint64_t lo = 0, hi = 0;
    for (const auto& m : mods) {
      uint64_t mn = UINT64_MAX, mx = 0;
      for (const auto& o : m.options) mn = std::min(mn, o.bytes), mx = std::max(mx, o.bytes);
      lo += mn;
      hi += mx;
    }
    const uint64_t target = lo + (hi - lo) * (trial % 10) / 9;
    AllocBudget b;
    b.target_bytes = target;
    auto plan = allocate(mods, {}, b);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_TRUE(plan->exact);
    EXPECT_LE(plan->bytes, target);
    EXPECT_NEAR(plan->predicted_kl, brute_force(mods, target), 1e-12) << "trial " << trial;
  }
}

// With a coarse resolution the plan stays within budget and is at least as good as the exact
// optimum of the budget shrunk by modules × unit.
TEST(Allocate, CoarseResolutionStaysFeasibleAndNearOptimal) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<AllocModule> mods = random_table(rng, 5, 4);
    uint64_t lo = 0;
    for (const auto& m : mods) {
      uint64_t mn = UINT64_MAX;
      for (const auto& o : m.options) mn = std::min(mn, o.bytes);
      lo += mn;
    }
    AllocBudget b;
    b.target_bytes = lo + 3000;
    b.max_states = 40;
    auto plan = allocate(mods, {}, b);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_GT(plan->unit_bytes, 1u);
    EXPECT_LE(plan->bytes, b.target_bytes);
    EXPECT_GE(plan->predicted_kl, brute_force(mods, b.target_bytes) - 1e-12);
    EXPECT_LE(plan->predicted_kl, brute_force(mods, b.target_bytes - 5 * plan->unit_bytes) + 1e-12);
  }
}

// A SmolLM2-shaped table (30 layers × 7 modules + the embedding), KL falling ~4x per bit with
// per-module noise (mxfp4 a little worse than affine 4-bit): every target from 2.7 to 7.5 bpw
// lands within 0.02 below it.
std::vector<AllocModule> smollm_like_table(std::mt19937& rng, uint64_t* fixed_params) {
  const uint64_t d = 576, inter = 1536, kv = 192, vocab = 49152;
  struct Shape {
    const char* name;
    TensorRole role;
    uint64_t params;
  };
  const Shape layer[] = {
      {"q_proj", TensorRole::kAttnQ, d * d},          {"k_proj", TensorRole::kAttnK, kv * d},
      {"v_proj", TensorRole::kAttnV, kv * d},         {"o_proj", TensorRole::kAttnO, d * d},
      {"gate_proj", TensorRole::kMlpGate, inter * d}, {"up_proj", TensorRole::kMlpUp, inter * d},
      {"down_proj", TensorRole::kMlpDown, d * inter}};
  std::lognormal_distribution<double> noise(0.0, 1.0);
  std::vector<AllocModule> mods;
  auto add = [&](std::string name, TensorRole role, uint64_t params) {
    AllocModule m;
    m.name = std::move(name);
    m.role = role;
    m.params = params;
    m.float_bytes = 2 * params;
    const double s = noise(rng) * 1e-3;
    for (int bits : {2, 3, 4, 5, 6, 8})
      m.options.push_back({affine(bits), s * std::pow(4.0, -bits) * 256,
                           quantized_module_bytes(params, affine(bits), 2)});
    m.options.push_back({QuantSpec{QuantMode::kMxfp4, 4, 32}, s * (1.0 + 0.5 * noise(rng)),
                         quantized_module_bytes(params, QuantSpec{QuantMode::kMxfp4, 4, 32}, 2)});
    mods.push_back(m);
  };
  add("model.embed_tokens", TensorRole::kEmbed, vocab * d);
  for (int l = 0; l < 30; ++l)
    for (const Shape& s : layer)
      add("model.layers." + std::to_string(l) + "." + s.name, s.role, s.params);
  *fixed_params = d * 61;  // norms
  return mods;
}

TEST(Allocate, BpwTargetsAreMetWithinTolerance) {
  std::mt19937 rng(3);
  uint64_t fixed = 0;
  std::vector<AllocModule> mods = smollm_like_table(rng, &fixed);
  for (double target = 2.7; target <= 7.5; target += 0.6) {
    AllocBudget b;
    b.target_bpw = target;
    b.fixed_params = fixed;
    b.fixed_bytes = 2 * fixed;
    auto plan = allocate(mods, {}, b);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_LE(plan->bpw, target) << target;
    EXPECT_GE(plan->bpw, target - kBpwTolerance) << target;
    // Monotone: more budget never predicts more KL.
    AllocBudget b2 = b;
    b2.target_bpw = target + 0.2;
    auto plan2 = allocate(mods, {}, b2);
    ASSERT_TRUE(plan2.ok());
    EXPECT_LE(plan2->predicted_kl, plan->predicted_kl);
  }
}

TEST(Allocate, AllowOverStaysWithinTolerance) {
  std::mt19937 rng(5);
  uint64_t fixed = 0;
  std::vector<AllocModule> mods = smollm_like_table(rng, &fixed);
  AllocBudget b;
  b.target_bpw = 4.0;
  b.fixed_params = fixed;
  b.fixed_bytes = 2 * fixed;
  b.allow_over = true;
  auto plan = allocate(mods, {}, b);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_LE(plan->bpw, 4.0 + kBpwTolerance);
  EXPECT_GE(plan->bpw, 4.0 - kBpwTolerance);
}

TEST(Allocate, PinsAndMinimumBitsAreHonoured) {
  std::mt19937 rng(9);
  uint64_t fixed = 0;
  std::vector<AllocModule> mods = smollm_like_table(rng, &fixed);
  AllocConstraints cons;
  cons.min_bits[TensorRole::kAttnV] = 6;
  cons.pinned["model.embed_tokens"] = std::nullopt;  // float: not among the options
  cons.pinned["model.layers.0.down_proj"] = affine(8);
  cons.pinned["model.layers.5.q_proj"] = affine(4, 32);  // unmeasured spec
  AllocBudget b;
  b.target_bpw = 6.0;
  b.fixed_params = fixed;
  b.fixed_bytes = 2 * fixed;
  auto plan = allocate(mods, cons, b);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_LE(plan->bpw, 6.0);
  EXPECT_GE(plan->bpw, 6.0 - kBpwTolerance);
  EXPECT_EQ(plan->unmeasured, 2);
  for (const AllocChoice& c : plan->modules) {
    if (c.name == "model.embed_tokens") {
      EXPECT_FALSE(c.option.spec.has_value());
      EXPECT_EQ(c.option.bytes, 2 * c.params);
    } else if (c.name == "model.layers.0.down_proj") {
      EXPECT_EQ(c.option.spec, affine(8));
    } else if (c.name == "model.layers.5.q_proj") {
      EXPECT_EQ(c.option.spec, affine(4, 32));
      EXPECT_EQ(c.option.bytes, c.params / 2 + c.params / 32 * 4);
    } else if (c.role == TensorRole::kAttnV) {
      ASSERT_TRUE(c.option.spec.has_value());
      EXPECT_GE(c.option.spec->bits, 6) << c.name;
    }
  }
}

TEST(Allocate, InfeasibleBudgetIsAClearError) {
  std::mt19937 rng(1);
  uint64_t fixed = 0;
  std::vector<AllocModule> mods = smollm_like_table(rng, &fixed);
  AllocBudget b;
  b.target_bpw = 2.0;  // below affine 2-bit g64 (2.5 bpw)
  b.fixed_params = fixed;
  b.fixed_bytes = 2 * fixed;
  auto plan = allocate(mods, {}, b);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().message.find("below the smallest plan"), std::string::npos)
      << plan.error().message;

  AllocConstraints cons;
  cons.min_bits[TensorRole::kMlpDown] = 9;
  b.target_bpw = 4.0;
  auto plan2 = allocate(mods, cons, b);
  ASSERT_FALSE(plan2.ok());
  EXPECT_NE(plan2.error().message.find("mlp_down"), std::string::npos) << plan2.error().message;

  cons = {};
  cons.pinned["model.nope"] = affine(4);
  EXPECT_FALSE(allocate(mods, cons, b).ok());
  b.target_bpw = -1;
  EXPECT_FALSE(allocate(mods, {}, b).ok());
  b.target_bpw = std::nan("");
  EXPECT_FALSE(allocate(mods, {}, b).ok());
}

TEST(Allocate, ModuleBytesMatchBitsPerWeight) {
  const uint64_t params = 576 * 1536;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int g : {32, 64, 128}) {
      QuantSpec s = affine(bits, g);
      EXPECT_DOUBLE_EQ(8.0 * quantized_module_bytes(params, s, 2) / params,
                       quant_bits_per_weight(s, 2));
    }
  QuantSpec mx{QuantMode::kMxfp4, 4, 32};
  EXPECT_DOUBLE_EQ(8.0 * quantized_module_bytes(params, mx, 2) / params,
                   quant_bits_per_weight(mx, 2));
}

// Two modules, 3-bit (100 bytes) or 4-bit (130 bytes); m0 is sensitive, m1 is not.
std::vector<AllocModule> two_module_table() {
  std::vector<AllocModule> mods(2);
  mods[0].name = "m0";
  mods[1].name = "m1";
  for (auto& m : mods) m.params = 256;
  mods[0].options = {{affine(3), 1.0, 100}, {affine(4), 0.1, 130}};
  mods[1].options = {{affine(3), 0.01, 100}, {affine(4), 0.005, 130}};
  return mods;
}

TEST(Allocate, UniformComparisonKeepsAnAllocationThatBeatsUniform) {
  std::vector<AllocModule> mods = two_module_table();
  AllocBudget b;
  b.target_bytes = 50 + 230;
  b.fixed_bytes = 50;
  b.fixed_params = 64;
  auto plan = allocate(mods, {}, b);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_NEAR(plan->predicted_kl, 0.11, 1e-12);  // m0 4-bit, m1 3-bit
  UniformComparison u = compare_with_uniform(mods, *plan);
  ASSERT_TRUE(u.spec);
  EXPECT_EQ(*u.spec, affine(3));  // uniform 4-bit (310 bytes) does not fit 280
  EXPECT_NEAR(u.predicted_kl, 1.01, 1e-12);
  EXPECT_EQ(u.bytes, 250u);
  EXPECT_FALSE(u.uniform_better);
}

TEST(Allocate, UniformComparisonFlagsAPlanUniformBeats) {
  std::vector<AllocModule> mods = two_module_table();
  // A cheaper 4-bit g128 option, and a plan that ignored it: uniform g128 is better and smaller.
  mods[0].options.push_back({affine(4, 128), 0.06, 120});
  mods[1].options.push_back({affine(4, 128), 0.04, 120});
  AllocPlan plan;
  plan.modules = {{"m0", TensorRole::kAttnQ, 256, mods[0].options[1]},
                  {"m1", TensorRole::kAttnQ, 256, mods[1].options[1]}};
  plan.predicted_kl = 0.105;
  plan.bytes = 50 + 260;
  UniformComparison u = compare_with_uniform(mods, plan);
  ASSERT_TRUE(u.spec);
  EXPECT_EQ(*u.spec, affine(4, 128));
  EXPECT_NEAR(u.predicted_kl, 0.10, 1e-12);
  EXPECT_EQ(u.bytes, 50u + 240u);
  EXPECT_TRUE(u.uniform_better);

  // No spec common to every module: nothing to compare with.
  mods[0].options = {mods[0].options[1]};  // m0: 4-bit only
  mods[1].options = {mods[1].options[0]};  // m1: 3-bit only
  plan.modules = {{"m0", TensorRole::kAttnQ, 256, mods[0].options[0]},
                  {"m1", TensorRole::kAttnQ, 256, mods[1].options[0]}};
  plan.bytes = 50 + 230;
  u = compare_with_uniform(mods, plan);
  EXPECT_FALSE(u.spec);
  EXPECT_FALSE(u.uniform_better);
}

}  // namespace
}  // namespace tq
