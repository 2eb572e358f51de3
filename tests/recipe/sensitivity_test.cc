#include "recipe/sensitivity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../testing/test_files.h"
#include "eval/token_metrics.h"
#include "io/safetensors.h"
#include "model/f32_model.h"
#include "model/forward.h"
#include "model/model_source.h"
#include "recipe/sensitivity_measure.h"

namespace tq {
namespace {

nlohmann::json tiny_cfg(const std::string& type, bool tied) {
  return {{"model_type", type},       {"hidden_size", 64},
          {"num_hidden_layers", 3},   {"intermediate_size", 128},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 16},           {"rms_norm_eps", 1e-5},
          {"vocab_size", 96},         {"max_position_embeddings", 256},
          {"rope_theta", 10000.0},    {"tie_word_embeddings", tied}};
}

// Seeded float checkpoint; `replace` (weight name -> data) swaps in given tensors.
std::string write_model(const std::string& dir, const nlohmann::json& cfg_json,
                        const std::map<std::string, std::vector<float>>& replace = {}) {
  std::filesystem::create_directories(dir);
  auto cfg = parse_model_config(cfg_json, "config.json");
  EXPECT_TRUE(cfg.ok());
  std::vector<TensorSpec> specs = expected_tensors(*cfg);
  std::vector<TensorDecl> decls;
  for (const auto& s : specs) decls.push_back({s.name, DType::kF32, s.shape});
  auto w = ShardedWriter::create(dir, decls, {});
  EXPECT_TRUE(w.ok()) << w.error().message;
  uint32_t seed = 7;
  for (const auto& s : specs) {
    std::mt19937 rng(seed++);
    std::normal_distribution<float> nd(0.0f, 0.25f);
    std::vector<float> v(static_cast<size_t>(shape_numel(s.shape)));
    for (auto& x : v) x = nd(rng);
    if (s.shape.size() == 1 && s.name.find("norm") != std::string::npos)
      for (auto& x : v) x = 1.0f + 0.3f * x;
    if (auto it = replace.find(s.name); it != replace.end()) v = it->second;
    EXPECT_TRUE((*w)->write(s.name, testing::as_bytes(v)).ok());
  }
  EXPECT_TRUE((*w)->finish().ok());
  testing::write_file(dir + "/config.json", cfg_json.dump());
  return dir;
}

std::vector<float> full_logits(const std::string& dir, std::span<const int32_t> toks) {
  auto src = open_model(dir);
  EXPECT_TRUE(src.ok()) << src.error().message;
  auto t = Transformer::load(*src, RuntimeOptions{.reference = true});
  EXPECT_TRUE(t.ok());
  KvCache kv = (*t)->new_cache(static_cast<int64_t>(toks.size()));
  std::vector<float> out(toks.size() * static_cast<size_t>(src->config.vocab_size));
  EXPECT_TRUE((*t)->forward(toks, kv, out).ok());
  return out;
}

CalibWindows windows(int64_t count, int64_t n, int64_t vocab) {
  CalibWindows w;
  w.count = count;
  w.seq_len = n;
  std::mt19937 rng(3);
  for (int64_t i = 0; i < count * n; ++i) w.tokens.push_back(static_cast<int32_t>(rng() % vocab));
  return w;
}

class SensitivityModel : public ::testing::TestWithParam<std::pair<const char*, bool>> {};

TEST_P(SensitivityModel, RunnerMatchesForwardAndKlMatchesAQuantizedCheckpoint) {
  const auto [type, tied] = GetParam();
  testing::TempDir dir;
  const nlohmann::json cfg = tiny_cfg(type, tied);
  const std::string base = write_model(dir.file("base"), cfg);
  auto src = open_model(base);
  ASSERT_TRUE(src.ok()) << src.error().message;
  auto runner = F32Model::load(*src);
  ASSERT_TRUE(runner.ok()) << runner.error().message;
  const int64_t V = 96, d = 64, n = 10;
  CalibWindows w = windows(2, n, V);

  // The pieces chained equal the reference forward.
  for (int64_t k = 0; k < w.count; ++k) {
    std::span<const int32_t> toks(w.tokens.data() + k * n, n);
    std::vector<float> x(n * d), logits(n * V);
    (*runner)->embed(toks, x.data());
    for (int64_t l = 0; l < 3; ++l) (*runner)->layer(l, x.data(), n);
    (*runner)->head(x.data(), n, logits.data());
    std::vector<float> want = full_logits(base, toks);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(logits[i], want[i], 1e-4) << i;
  }

  auto meter = SensitivityMeter::prepare(**runner, w);
  ASSERT_TRUE(meter.ok()) << meter.error().message;
  std::vector<ModuleSensitivity> mods = quantizable_modules((*runner)->config(), DType::kBF16);
  ASSERT_EQ(mods.size(), 1u + 3 * 7 + (tied ? 0 : 1));
  const QuantSpec spec{QuantMode::kAffine, 3, 32};
  for (const ModuleSensitivity& m : mods) {
    if (!(m.role == TensorRole::kEmbed || m.role == TensorRole::kLmHead ||
          (m.layer == 1 && (m.role == TensorRole::kAttnV || m.role == TensorRole::kMlpDown))))
      continue;
    const int64_t layer = m.layer;
    std::span<const float> own = (*runner)->weight(m.role, layer);
    EXPECT_NEAR(meter->mean_kl(m, own), 0.0, 1e-6) << m.name;
    auto wq = rtn_roundtrip(own, m.shape[0], m.shape[1], spec, DType::kBF16);
    ASSERT_TRUE(wq.ok()) << wq.error().message;
    const double got = meter->mean_kl(m, *wq);
    // The same KL through a whole checkpoint with only that tensor replaced.
    const std::string qdir = write_model(dir.file(m.name), cfg, {{m.name + ".weight", *wq}});
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t k = 0; k < w.count; ++k) {
      std::span<const int32_t> toks(w.tokens.data() + k * n, n);
      std::vector<float> b = full_logits(base, toks), c = full_logits(qdir, toks);
      for (int64_t t = 1; t < n; ++t) {
        sum += eval::compare_rows({b.data() + (t - 1) * V, size_t(V)},
                                  {c.data() + (t - 1) * V, size_t(V)}, toks[t])
                   .kl;
        ++cnt;
      }
    }
    const double want = sum / cnt;
    EXPECT_GT(want, 1e-5) << m.name;
    EXPECT_NEAR(got, want, 1e-4 * want + 1e-7) << m.name;
  }

  // More bits, less damage.
  ModuleSensitivity m = mods[5];
  const QuantSpec specs[] = {
      {QuantMode::kAffine, 2, 32}, {QuantMode::kAffine, 8, 32}, {QuantMode::kMxfp4, 4, 32}};
  int steps = 0;
  ASSERT_TRUE(meter->measure(m, specs, DType::kBF16, [&] { ++steps; }).ok());
  EXPECT_EQ(steps, 3);
  ASSERT_EQ(m.specs.size(), 3u);
  EXPECT_GT(m.specs[0].kl, 10 * m.specs[1].kl);
  EXPECT_EQ(m.specs[0].bytes, m.params / 4 + m.params / 32 * 4);
  EXPECT_EQ(m.specs[2].bytes, m.params / 2 + m.params / 32);

  // measure() runs its specs as one batch through the network: the same KL as one mean_kl per
  // spec, for a module of each kind (embedding, attention, MLP, and lm_head when untied).
  for (const ModuleSensitivity& base_m : mods) {
    if (!(base_m.role == TensorRole::kEmbed || base_m.role == TensorRole::kLmHead ||
          (base_m.layer == 1 &&
           (base_m.role == TensorRole::kAttnK || base_m.role == TensorRole::kMlpUp))))
      continue;
    ModuleSensitivity b = base_m;
    ASSERT_TRUE(meter->measure(b, specs, DType::kBF16, nullptr).ok());
    ASSERT_EQ(b.specs.size(), 3u);
    std::span<const float> own = (*runner)->weight(b.role, b.layer);
    for (size_t i = 0; i < 3; ++i) {
      auto wq = rtn_roundtrip(own, b.shape[0], b.shape[1], specs[i], DType::kBF16);
      ASSERT_TRUE(wq.ok());
      const double one = meter->mean_kl(b, *wq);
      // f32 products of other batch sizes round differently: agreement to 1e-4, as above.
      EXPECT_NEAR(b.specs[i].kl, one, 1e-4 * one + 1e-8) << b.name << " spec " << i;
    }
  }

  // scale_above_bits = 4: the 8-bit spec is not run but scaled from the 4-bit one by the ratio
  // of squared weight errors; the measured specs keep their values; mxfp4 is always measured.
  const QuantSpec mixed[] = {{QuantMode::kAffine, 2, 32},
                             {QuantMode::kAffine, 4, 32},
                             {QuantMode::kAffine, 8, 32},
                             {QuantMode::kMxfp4, 4, 32}};
  ModuleSensitivity full = mods[5], scaled = mods[5];
  ASSERT_TRUE(meter->measure(full, mixed, DType::kBF16, nullptr).ok());
  ASSERT_TRUE(meter->measure(scaled, mixed, DType::kBF16, nullptr, 4).ok());
  ASSERT_EQ(scaled.specs.size(), 4u);
  for (size_t i : {0u, 1u, 3u}) {
    EXPECT_EQ(scaled.specs[i].scaled_from_bits, 0);
    EXPECT_NEAR(scaled.specs[i].kl, full.specs[i].kl, 1e-4 * full.specs[i].kl + 1e-8);
  }
  EXPECT_EQ(scaled.specs[2].scaled_from_bits, 4);
  std::span<const float> own = (*runner)->weight(scaled.role, scaled.layer);
  auto err2 = [&](const QuantSpec& q) {
    auto wq = rtn_roundtrip(own, scaled.shape[0], scaled.shape[1], q, DType::kBF16);
    double e = 0;
    for (size_t i = 0; i < own.size(); ++i) e += std::pow(double((*wq)[i]) - double(own[i]), 2);
    return e;
  };
  EXPECT_NEAR(scaled.specs[2].kl, scaled.specs[1].kl * err2(mixed[2]) / err2(mixed[1]),
              1e-9 * scaled.specs[1].kl);
  // ... and of the order of what running it measures (a random 3-layer model is a loose check;
  // on SmolLM2 the scaled table gives the same plans, bench/README.md).
  EXPECT_GT(scaled.specs[2].kl, full.specs[2].kl / 3);
  EXPECT_LT(scaled.specs[2].kl, full.specs[2].kl * 3);
}

INSTANTIATE_TEST_SUITE_P(Families, SensitivityModel,
                         ::testing::Values(std::make_pair("llama", false),
                                           std::make_pair("qwen3", true)));

SensitivityTable sample_table() {
  SensitivityTable t;
  t.model = "m";
  t.model_fingerprint = "fp";
  t.family = "llama";
  t.tie_word_embeddings = true;
  t.calibration = {"dir", {"a.txt"}, "abc", 128, 4, 508};
  t.specs = {{QuantMode::kAffine, 4, 64}, {QuantMode::kMxfp4, 4, 32}};
  t.params_total = 1000;
  t.fixed_params = 10;
  t.fixed_bytes = 20;
  ModuleSensitivity m;
  m.name = "model.layers.0.mlp.up_proj";
  m.role = TensorRole::kMlpUp;
  m.layer = 0;
  m.shape = {8, 64};
  m.params = 512;
  m.float_bytes = 1024;
  m.seconds = 1.5;
  m.specs = {{t.specs[0], 0.25, 288}, {t.specs[1], 0.125, 272}};
  t.modules.push_back(m);
  return t;
}

TEST(SensitivityFile, RoundTripsAndRejectsBadFiles) {
  testing::TempDir dir;
  const std::string p = dir.file("s.json");
  SensitivityTable t = sample_table();
  ASSERT_TRUE(write_sensitivity(p, t).ok());
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  auto r = read_sensitivity(p);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(sensitivity_to_json(*r), sensitivity_to_json(t));
  EXPECT_EQ(r->modules[0].specs[1].kl, 0.125);
  auto mods = alloc_modules(*r, true);
  ASSERT_EQ(mods.size(), 1u);
  ASSERT_EQ(mods[0].options.size(), 3u);
  EXPECT_FALSE(mods[0].options[2].spec.has_value());
  EXPECT_EQ(mods[0].options[2].bytes, 1024u);

  testing::write_file(p, "{\"format\": \"turboquant.sensitivity\", \"version\": 1}");
  auto bad = read_sensitivity(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(testing::contains(bad.error().message, p)) << bad.error().message;
  testing::write_file(p, "not json");
  EXPECT_FALSE(read_sensitivity(p).ok());
  nlohmann::json j = sensitivity_to_json(t);
  j["modules"][0]["specs"][0]["bits"] = 7;
  EXPECT_FALSE(sensitivity_from_json(j, p).ok());
}

TEST(SensitivityFile, AllocatesFromATable) {
  SensitivityTable t = sample_table();
  ModuleSensitivity m2 = t.modules[0];
  m2.name = "model.layers.0.mlp.down_proj";
  m2.role = TensorRole::kMlpDown;
  m2.specs = {{t.specs[0], 0.5, 288}, {t.specs[1], 0.0625, 272}};
  t.modules.push_back(m2);
  AllocBudget b;
  b.target_bytes = 20 + 288 + 272;
  auto p = allocate_from_table(t, {}, b);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->bytes, 20u + 272 + 272);  // mxfp4 has the lower KL in both modules
  EXPECT_EQ(p->params, 10u + 2 * 512);   // fixed params come from the table
  EXPECT_DOUBLE_EQ(p->predicted_kl, 0.125 + 0.0625);
  nlohmann::json j = alloc_plan_json(*p);
  EXPECT_EQ(j["spec_counts"]["mxfp4"], 2);
  EXPECT_EQ(j["modules"][1]["spec"]["mode"], "mxfp4");
  AllocConstraints pin;
  pin.pinned["model.layers.0.mlp.down_proj"] = std::nullopt;
  b.target_bytes = 20 + 272 + 1024;
  auto pf = allocate_from_table(t, pin, b);
  ASSERT_TRUE(pf.ok()) << pf.error().message;
  EXPECT_TRUE(alloc_plan_json(*pf)["modules"][1]["spec"].is_null());
}

TEST(SensitivityFile, CandidateSpecs) {
  auto s = candidate_specs({"affine", "mxfp4"}, {2, 4}, {64});
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[1], (QuantSpec{QuantMode::kAffine, 4, 64}));
  EXPECT_EQ((*s)[2], (QuantSpec{QuantMode::kMxfp4, 4, 32}));
  auto g = candidate_specs({"affine"}, {3, 4}, {64, 128});
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->size(), 4u);
  EXPECT_EQ((*g)[2], (QuantSpec{QuantMode::kAffine, 3, 128}));
  auto d = candidate_specs({"affine"}, {4, 4}, {64, 64});  // a repeated entry is measured once
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->size(), 1u);
  EXPECT_FALSE(candidate_specs({"int4"}, {4}, {64}).ok());
  EXPECT_FALSE(candidate_specs({"affine"}, {7}, {64}).ok());
  EXPECT_FALSE(candidate_specs({"affine"}, {4}, {48}).ok());
}

}  // namespace
}  // namespace tq
