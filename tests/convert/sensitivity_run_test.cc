#include "convert/sensitivity_run.h"

#include <gtest/gtest.h>

#include "model/model_config.h"
#include "recipe/sensitivity_measure.h"

namespace tq {
namespace {

nlohmann::json tiny_cfg() {
  return {{"model_type", "llama"},    {"hidden_size", 64},
          {"num_hidden_layers", 3},   {"intermediate_size", 128},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 16},           {"rms_norm_eps", 1e-5},
          {"vocab_size", 96},         {"max_position_embeddings", 256},
          {"rope_theta", 10000.0},    {"tie_word_embeddings", false}};
}

TEST(SensitivityRun, EstimateScalesTheReferencePassByTheLayersEachModuleReruns) {
  auto cfg = parse_model_config(tiny_cfg(), "config.json");
  ASSERT_TRUE(cfg.ok());
  const std::vector<ModuleSensitivity> all = quantizable_modules(*cfg, DType::kBF16);
  const std::vector<QuantSpec> specs = {{QuantMode::kAffine, 4, 64}, {QuantMode::kAffine, 8, 64}};
  auto one = [&](const std::string& name) {
    for (const auto& m : all)
      if (m.name == name) return std::vector<ModuleSensitivity>{m};
    ADD_FAILURE() << name;
    return std::vector<ModuleSensitivity>{};
  };
  // The embedding re-runs the whole model: one reference pass per spec.
  EXPECT_DOUBLE_EQ(estimate_measure_seconds(*cfg, all, one("model.embed_tokens"), specs, 3.0), 6.0);
  const double first =
      estimate_measure_seconds(*cfg, all, one("model.layers.0.self_attn.q_proj"), specs, 3.0);
  const double last =
      estimate_measure_seconds(*cfg, all, one("model.layers.2.mlp.down_proj"), specs, 3.0);
  const double head = estimate_measure_seconds(*cfg, all, one("lm_head"), specs, 3.0);
  EXPECT_DOUBLE_EQ(first, 6.0);  // layer 0's attention re-runs every layer too
  EXPECT_LT(head, last);
  EXPECT_LT(last, first);
  EXPECT_GT(head, 0.0);
  // A group that does not divide the input width is skipped, not measured.
  const std::vector<QuantSpec> wide = {{QuantMode::kAffine, 4, 128}};
  EXPECT_DOUBLE_EQ(
      estimate_measure_seconds(*cfg, all, one("model.layers.0.self_attn.q_proj"), wide, 3.0), 0.0);
  EXPECT_GT(estimate_measure_seconds(*cfg, all, all, specs, 3.0), 6.0);
}

TEST(SensitivityRun, GroupSizeListIsCheckedBeforeAnyWork) {
  SensitivityRunOptions o;
  o.model = "/nonexistent/model";  // never opened: the lists are refused first
  auto run = [&](const std::string& groups) {
    o.group_sizes = groups;
    auto r = run_sensitivity(
        o, [](const std::string&) {}, [](const SensitivityProgress&) {});
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.error().message;
  };
  EXPECT_NE(run("64,x").find("--group-size: bad value 'x'"), std::string::npos);
  EXPECT_NE(run("").find("--group-size: empty list"), std::string::npos);
  EXPECT_NE(run("64,48").find("group size 48"), std::string::npos);
  EXPECT_NE(run("32,128").find("/nonexistent/model"), std::string::npos);  // the list was fine
}

}  // namespace
}  // namespace tq
