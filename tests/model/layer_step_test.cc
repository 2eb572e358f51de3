// The shared decoder layer (model/layer.h) and its f32 step: the one role mapping, the
// geometry check, the hooks (weight override, linear tap) and the ways callers cut a call
// (several sequences in one batch, a KV prefix, stages one by one).
#include "model/f32_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "kernels/ops.h"
#include "model/rope.h"

namespace tq {
namespace {

ModelConfig config(const std::string& type) {
  nlohmann::json j = {{"model_type", type},       {"hidden_size", 64},
                      {"num_hidden_layers", 1},   {"intermediate_size", 96},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"head_dim", 16},           {"rms_norm_eps", 1e-5},
                      {"vocab_size", 50},         {"max_position_embeddings", 64},
                      {"rope_theta", 10000.0},    {"tie_word_embeddings", true}};
  auto c = parse_model_config(j, "config.json");
  EXPECT_TRUE(c.ok()) << c.error().message;
  return *c;
}

std::vector<float> randn(size_t n, uint32_t seed, float sd = 0.3f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

F32Layer random_layer(const ModelConfig& c) {
  F32Layer L;
  uint32_t seed = 1;
  Status st = load_layer_tensors(c, 0, L, [&](const TensorSpec& s, std::vector<float>& dst) {
    const bool norm = s.shape.size() == 1 && s.name.find("norm") != std::string::npos;
    dst = randn(static_cast<size_t>(shape_numel(s.shape)), seed++, 0.2f, norm ? 1.0f : 0.0f);
    return ok_status();
  });
  EXPECT_TRUE(st.ok());
  return L;
}

struct Fixture {
  explicit Fixture(const std::string& type)
      : c(config(type)), L(random_layer(c)), step(c), inv(*rope_inv_freq(c)) {}
  ModelConfig c;
  F32Layer L;
  F32Step step;
  std::vector<double> inv;
};

TEST(Layer, EveryPerLayerRoleHasItsOwnField) {
  for (Family f : {Family::kLlama, Family::kQwen2, Family::kQwen3}) {
    F32Layer L;
    std::set<const void*> fields;
    for (const TensorKind& k : family_table(f)) {
      if (!k.per_layer() || k.when == When::kIgnored) continue;
      const void* p = nullptr;
      EXPECT_TRUE(with_layer_tensor(L, k.role, [&](std::vector<float>& v) { p = &v; }))
          << tensor_role_name(k.role);
      EXPECT_TRUE(fields.insert(p).second) << tensor_role_name(k.role) << " shares a field";
    }
    EXPECT_FALSE(with_layer_tensor(L, TensorRole::kEmbed, [](std::vector<float>&) {}));
  }
}

TEST(Layer, GeometryCheckRejectsWhatTheStepsCannotIndex) {
  ModelConfig c = config("llama");
  EXPECT_TRUE(check_geometry(c).ok());
  ModelConfig bad = c;
  bad.num_key_value_heads = 3;
  EXPECT_NE(check_geometry(bad).error().message.find("multiple"), std::string::npos);
  bad = c, bad.head_dim = 15;
  EXPECT_NE(check_geometry(bad).error().message.find("odd"), std::string::npos);
  bad = c, bad.num_attention_heads = 1 << 20, bad.num_key_value_heads = 1, bad.head_dim = 1 << 12;
  EXPECT_NE(check_geometry(bad).error().message.find("too large"), std::string::npos);
  bad = c, bad.vocab_size = 0;
  EXPECT_FALSE(check_geometry(bad).ok());
}

TEST(F32Step, TapSeesEveryLinearInputInOrder) {
  Fixture f("qwen2");  // biases
  const int64_t n = 5, d = f.c.hidden_size;
  std::vector<float> x = randn(static_cast<size_t>(n * d), 9);
  const std::vector<float> x0 = x;
  F32Buffers buf;
  F32Io io = buf.bind(f.c, f.inv, x.data(), n);
  std::vector<std::pair<TensorRole, int64_t>> seen;
  std::vector<float> q_input;
  LinearTap tap = [&](TensorRole role, const float* in, int64_t rows, int64_t cols) {
    EXPECT_EQ(rows, n);
    seen.push_back({role, cols});
    if (role == TensorRole::kAttnQ) q_input.assign(in, in + rows * cols);
  };
  io.tap = &tap;
  f.step.run(f.L, io);
  using R = TensorRole;
  const int64_t qd = 64, inter = 96;
  const std::vector<std::pair<R, int64_t>> want = {
      {R::kAttnQ, d},   {R::kAttnK, d}, {R::kAttnV, d},      {R::kAttnO, qd},
      {R::kMlpGate, d}, {R::kMlpUp, d}, {R::kMlpDown, inter}};
  EXPECT_EQ(seen, want);
  std::vector<float> normed(x0.size());
  rms_norm(x0.data(), f.L.norm_attn.data(), n, d, 1e-5f, normed.data());
  EXPECT_EQ(q_input, normed);
}

TEST(F32Step, OverrideReplacesOnlyItsRole) {
  Fixture f("qwen3");  // q/k norms
  const int64_t n = 4, d = f.c.hidden_size;
  const std::vector<float> x0 = randn(static_cast<size_t>(n * d), 3);
  auto run = [&](const WeightOverride* ov) {
    std::vector<float> x = x0;
    F32Buffers buf;
    F32Io io = buf.bind(f.c, f.inv, x.data(), n);
    io.weight = ov;
    f.step.run(f.L, io);
    return x;
  };
  const std::vector<float> plain = run(nullptr);
  EXPECT_NE(plain, x0);
  // The layer's own weight as the override: the same bits.
  const WeightOverride same{TensorRole::kMlpUp, f.L.up.data()};
  EXPECT_EQ(run(&same), plain);
  // A zero down projection (no bias in qwen3): the layer adds only its attention branch.
  const std::vector<float> zeros(f.L.down.size(), 0.0f);
  const WeightOverride zero_down{TensorRole::kMlpDown, zeros.data()};
  std::vector<float> attn_only = x0;
  F32Buffers buf;
  F32Io io = buf.bind(f.c, f.inv, attn_only.data(), n);
  f.step.attn_norm(f.L, io);
  f.step.qkv(f.L, io);
  f.step.attn_core(f.L, io);
  f.step.attn_out(f.L, io);
  EXPECT_EQ(run(&zero_down), attn_only);
}

TEST(F32Step, BatchedSequencesAndKvPrefixMatchOneCallEach) {
  Fixture f("llama");
  const int64_t n = 6, d = f.c.hidden_size, kvd = 32;
  const std::vector<float> a = randn(static_cast<size_t>(n * d), 11);
  const std::vector<float> b = randn(static_cast<size_t>(n * d), 12);
  auto alone = [&](std::vector<float> x) {
    F32Buffers buf;
    F32Io io = buf.bind(f.c, f.inv, x.data(), n);
    f.step.run(f.L, io);
    return x;
  };
  const std::vector<float> ya = alone(a), yb = alone(b);
  // Two sequences as one batch, each from position 0.
  std::vector<float> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  F32Buffers buf;
  F32Io io = buf.bind(f.c, f.inv, ab.data(), n, 2);
  f.step.run(f.L, io);
  for (int64_t i = 0; i < n * d; ++i) {
    EXPECT_NEAR(ab[i], ya[i], 1e-5f);
    EXPECT_NEAR(ab[n * d + i], yb[i], 1e-5f);
  }
  // The first 4 rows, then the last 2 over the cached keys and values of the first 4.
  std::vector<float> k(static_cast<size_t>(n * kvd)), v(k.size());
  std::vector<float> x = a;
  F32Buffers b1, b2;
  F32Io first = b1.bind(f.c, f.inv, x.data(), 4, 1, 0, k.data(), v.data());
  f.step.run(f.L, first);
  F32Io rest = b2.bind(f.c, f.inv, x.data() + 4 * d, 2, 1, 4, k.data(), v.data());
  f.step.run(f.L, rest);
  for (int64_t i = 0; i < n * d; ++i) EXPECT_NEAR(x[i], ya[i], 1e-5f) << i;
}

}  // namespace
}  // namespace tq
