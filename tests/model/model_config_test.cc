#include "model/model_config.h"

#include <gtest/gtest.h>

#include "../testing/test_files.h"

namespace tq {
namespace {

using json = nlohmann::json;
using testing::contains;

json llama_min() {
  return json::parse(R"({"model_type":"llama","hidden_size":64,"num_hidden_layers":2,
    "intermediate_size":128,"num_attention_heads":4,"rms_norm_eps":1e-5,"vocab_size":256})");
}
json qwen3_full() {
  return json::parse(R"({"model_type":"qwen3","hidden_size":64,"num_hidden_layers":2,
    "intermediate_size":128,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
    "rms_norm_eps":1e-6,"vocab_size":256,"max_position_embeddings":4096,"rope_theta":1000000,
    "tie_word_embeddings":true,"torch_dtype":"bfloat16"})");
}

std::string parse_err(const json& j) {
  auto r = parse_model_config(j, "cfg/config.json");
  return r.ok() ? "" : r.error().message;
}

TEST(ModelConfig, LlamaDefaults) {
  auto r = parse_model_config(llama_min(), "config.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ModelConfig& c = *r;
  EXPECT_EQ(c.family, Family::kLlama);
  EXPECT_EQ(family_name(c.family), "llama");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_FALSE(c.quantization.has_value());
  EXPECT_EQ(c.max_position_embeddings, 0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.torch_dtype, "");
}

TEST(ModelConfig, LlamaExplicitValuesAndMistral) {
  json j = llama_min();
  j["model_type"] = "mistral";
  j["head_dim"] = 8;
  j["num_key_value_heads"] = 2;
  j["tie_word_embeddings"] = false;
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  j["rope_theta"] = 500000.0;
  j["dtype"] = "float16";
  j["head_dim"] = 8;
  j["sliding_window"] = nullptr;
  auto r = parse_model_config(j, "config.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->family, Family::kLlama);
  EXPECT_EQ(r->model_type, "mistral");
  EXPECT_EQ(r->head_dim, 8);
  EXPECT_EQ(r->num_key_value_heads, 2);
  EXPECT_FALSE(r->tie_word_embeddings);
  EXPECT_TRUE(r->attention_bias);
  EXPECT_TRUE(r->mlp_bias);
  EXPECT_EQ(r->rope_theta, 500000.0);
  EXPECT_EQ(r->torch_dtype, "float16");
  j["head_dim"] = nullptr;  // null reads as absent
  EXPECT_EQ(parse_model_config(j, "c")->head_dim, 16);
}

TEST(ModelConfig, Qwen2IgnoresHeadDimAndDefaults) {
  json j = llama_min();
  j["model_type"] = "qwen2";
  EXPECT_TRUE(contains(parse_err(j), "missing required key 'num_key_value_heads'"));
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 999;
  j["attention_bias"] = false;
  auto r = parse_model_config(j, "config.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->family, Family::kQwen2);
  EXPECT_EQ(r->head_dim, 16);
  EXPECT_EQ(r->rope_theta, 1e6);
  EXPECT_EQ(r->max_position_embeddings, 32768);
  EXPECT_TRUE(r->attention_bias);
  EXPECT_TRUE(r->tie_word_embeddings);
}

TEST(ModelConfig, Qwen3RequiresEveryGeometryKey) {
  auto r = parse_model_config(qwen3_full(), "config.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->family, Family::kQwen3);
  EXPECT_EQ(r->head_dim, 32);
  EXPECT_EQ(r->rope_theta, 1e6);
  EXPECT_EQ(r->torch_dtype, "bfloat16");
  EXPECT_FALSE(r->attention_bias);
  for (const char* key :
       {"hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
        "rms_norm_eps", "vocab_size", "num_key_value_heads", "max_position_embeddings",
        "rope_theta", "head_dim", "tie_word_embeddings"}) {
    json j = qwen3_full();
    j.erase(key);
    EXPECT_EQ(parse_err(j), fmt::format("cfg/config.json: missing required key '{}'", key));
  }
  // rope_parameters supplies a missing rope_theta.
  json j = qwen3_full();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e6}};
  ASSERT_TRUE(parse_model_config(j, "c").ok());
  EXPECT_EQ(parse_model_config(j, "c")->rope_theta, 5e6);
  EXPECT_FALSE(parse_model_config(j, "c")->rope_scaling.has_value());
}

TEST(ModelConfig, RejectsUnsupportedOrMissingModelType) {
  json j = llama_min();
  j["model_type"] = "gemma3";
  EXPECT_EQ(parse_err(j),
            "cfg/config.json: unsupported model_type 'gemma3' (supported: llama, mistral, qwen2, "
            "qwen3, qwen3_5)");
  j.erase("model_type");
  EXPECT_EQ(parse_err(j), "cfg/config.json: missing required key 'model_type'");
  EXPECT_TRUE(contains(parse_err(json::array()), "not a JSON object"));
  for (const char* key : {"hidden_size", "num_hidden_layers", "intermediate_size",
                          "num_attention_heads", "rms_norm_eps", "vocab_size"}) {
    json k = llama_min();
    k.erase(key);
    EXPECT_EQ(parse_err(k), fmt::format("cfg/config.json: missing required key '{}'", key));
  }
}

TEST(ModelConfig, RejectsWrongTypes) {
  auto with = [](const char* key, json v) {
    json j = llama_min();
    j[key] = std::move(v);
    return parse_err(j);
  };
  EXPECT_EQ(with("hidden_size", "64"),
            "cfg/config.json: 'hidden_size' must be an integer, got string");
  EXPECT_EQ(with("hidden_size", 64.0),
            "cfg/config.json: 'hidden_size' must be an integer, got float");
  EXPECT_EQ(with("rms_norm_eps", "1e-5"),
            "cfg/config.json: 'rms_norm_eps' must be a number, got string");
  EXPECT_EQ(with("tie_word_embeddings", "true"),
            "cfg/config.json: 'tie_word_embeddings' must be true or false, got string");
  EXPECT_EQ(with("tie_word_embeddings", 1),
            "cfg/config.json: 'tie_word_embeddings' must be true or false, got integer");
  EXPECT_EQ(with("model_type", 3), "cfg/config.json: 'model_type' must be a string, got integer");
  EXPECT_TRUE(contains(with("rope_scaling", "llama3"), "'rope_scaling' must be an object"));
  EXPECT_TRUE(contains(with("rope_parameters", 1), "'rope_parameters' must be an object"));
  EXPECT_TRUE(contains(with("quantization", 4), "quantization must be an object"));
}

TEST(ModelConfig, SanityChecks) {
  auto with = [](const char* key, json v) {
    json j = llama_min();
    j[key] = std::move(v);
    return parse_err(j);
  };
  EXPECT_TRUE(contains(with("hidden_size", 0), "'hidden_size' = 0 is out of range"));
  EXPECT_TRUE(contains(with("vocab_size", -5), "'vocab_size' = -5 is out of range"));
  EXPECT_TRUE(contains(with("num_hidden_layers", int64_t{1} << 40), "out of range"));
  EXPECT_TRUE(contains(with("hidden_size", 66), "not divisible by num_attention_heads 4"));
  EXPECT_TRUE(contains(with("num_key_value_heads", 3), "not a multiple of num_key_value_heads 3"));
  EXPECT_TRUE(contains(with("rms_norm_eps", 0), "'rms_norm_eps' must be positive"));
  EXPECT_TRUE(contains(with("rope_theta", -1), "'rope_theta' must be positive"));
  EXPECT_TRUE(contains(with("head_dim", 0), "'head_dim' = 0 is out of range"));
  EXPECT_EQ(with("head_dim", 24), "");  // head_dim need not divide hidden when given
}

TEST(ModelConfig, RopeScaling) {
  json j = llama_min();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}};
  auto r = parse_model_config(j, "c");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->rope_scaling.has_value());
  EXPECT_EQ(r->rope_scaling->type, "llama3");
  EXPECT_EQ(r->rope_scaling->factor, 32.0);
  EXPECT_EQ(r->rope_scaling->low_freq_factor, 1.0);
  EXPECT_EQ(r->rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(r->rope_scaling->original_max_position_embeddings, 8192);

  j["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 8},
                       {"low_freq_factor", 2.0},
                       {"high_freq_factor", 8.0},
                       {"original_max_position_embeddings", 4096},
                       {"rope_type", "linear"}};
  r = parse_model_config(j, "c");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->rope_scaling->type, "llama3");  // `type` wins over `rope_type`
  EXPECT_EQ(r->rope_scaling->low_freq_factor, 2.0);
  EXPECT_EQ(r->rope_scaling->original_max_position_embeddings, 4096);

  j["rope_scaling"] = {{"rope_type", "linear"}};
  EXPECT_TRUE(contains(parse_err(j), "missing required key 'rope_scaling.factor'"));
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", "8"}};
  EXPECT_TRUE(contains(parse_err(j), "'rope_scaling.factor' must be a number, got string"));
  j["rope_scaling"] = {{"rope_type", "ntk-magic"}, {"factor", 2}};
  EXPECT_TRUE(contains(parse_err(j), "unsupported rope_scaling type 'ntk-magic'"));
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_FALSE(parse_model_config(j, "c")->rope_scaling.has_value());
  j["rope_scaling"] = nullptr;
  EXPECT_FALSE(parse_model_config(j, "c")->rope_scaling.has_value());
}

TEST(ModelConfig, RopeParametersAreAFallback) {
  json j = llama_min();
  j["rope_parameters"] = {{"rope_type", "llama3"},  {"rope_theta", 500000.0},
                          {"factor", 32.0},         {"high_freq_factor", 4.0},
                          {"low_freq_factor", 1.0}, {"original_max_position_embeddings", 8192}};
  auto r = parse_model_config(j, "c");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->rope_theta, 500000.0);
  ASSERT_TRUE(r->rope_scaling.has_value());
  EXPECT_EQ(r->rope_scaling->type, "llama3");
  EXPECT_EQ(r->rope_scaling->factor, 32.0);
  // Explicit rope_theta / rope_scaling win.
  j["rope_theta"] = 10.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  r = parse_model_config(j, "c");
  EXPECT_EQ(r->rope_theta, 10.0);
  EXPECT_EQ(r->rope_scaling->type, "linear");
}

TEST(ModelConfig, QuantizationBlock) {
  json j = llama_min();
  j["quantization"] = json::parse(R"({"group_size":64,"bits":4,"mode":"affine",
      "model.layers.0.mlp.down_proj":{"bits":6},
      "model.layers.1.mlp.up_proj":{"mode":"mxfp4"},
      "model.layers.1.mlp.gate_proj":{"group_size":32,"bits":8,"mode":"affine"},
      "lm_head":false, "model.embed_tokens":true})");
  j["quantization_config"] = {{"quant_method", "ignored-when-quantization-present"}};
  auto r = parse_model_config(j, "c");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->quantization.has_value());
  const QuantizationConfig& q = *r->quantization;
  EXPECT_EQ(q.global, (QuantSpec{QuantMode::kAffine, 4, 64}));
  EXPECT_EQ(q.spec_for("model.layers.0.mlp.down_proj"), (QuantSpec{QuantMode::kAffine, 6, 64}));
  EXPECT_EQ(q.spec_for("model.layers.1.mlp.up_proj"), (QuantSpec{QuantMode::kMxfp4, 4, 32}));
  EXPECT_EQ(q.spec_for("model.layers.1.mlp.gate_proj"), (QuantSpec{QuantMode::kAffine, 8, 32}));
  EXPECT_EQ(q.spec_for("lm_head"), std::nullopt);
  EXPECT_EQ(q.spec_for("model.embed_tokens"), q.global);
  EXPECT_EQ(q.spec_for("model.layers.0.self_attn.q_proj"), q.global);

  // A per-module dict without mode is affine even under a global mxfp4.
  j["quantization"] = json::parse(R"({"group_size":32,"bits":4,"mode":"mxfp4","a":{"bits":3}})");
  r = parse_model_config(j, "c");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->quantization->global.mode, QuantMode::kMxfp4);
  EXPECT_EQ(r->quantization->spec_for("a"), (QuantSpec{QuantMode::kAffine, 3, 64}));
}

TEST(ModelConfig, QuantizationErrorsAndFallback) {
  auto with_q = [](const char* key, const char* text) {
    json j = llama_min();
    j[key] = json::parse(text);
    return parse_err(j);
  };
  EXPECT_TRUE(contains(with_q("quantization", R"({"bits":4})"), "missing 'group_size'"));
  EXPECT_TRUE(contains(with_q("quantization", R"({"group_size":64})"), "missing 'bits'"));
  EXPECT_TRUE(contains(with_q("quantization", R"({"group_size":64,"bits":7})"), "quantization"));
  EXPECT_NE(with_q("quantization", R"({"group_size":64,"bits":7})"), "");
  EXPECT_NE(with_q("quantization", R"({"group_size":64,"bits":4,"mode":"mxfp4"})"), "");
  EXPECT_TRUE(contains(with_q("quantization", R"({"group_size":64,"bits":4,"mode":"int4"})"),
                       "'int4' is not one of"));
  EXPECT_TRUE(contains(with_q("quantization", R"({"group_size":64,"bits":"4"})"),
                       "quantization.bits must be an integer, got string"));
  EXPECT_TRUE(
      contains(with_q("quantization", R"({"group_size":64,"bits":4,"m":{"bits":4,"scale":1}})"),
               "has unknown key 'scale'"));
  EXPECT_TRUE(contains(with_q("quantization", R"({"group_size":64,"bits":4,"m":{"bits":5,
      "group_size":16}})"),
                       "quantization[\"m\"]"));
  EXPECT_TRUE(contains(with_q("quantization_config", R"({"quant_method":"gptq","bits":4})"),
                       "quant_method \"gptq\" is not supported"));
  // null bits/group_size mean the mode's defaults, as to_quantized(group_size=None): stock
  // mlx_lm.convert --quant-predicate mixed_3_6 writes {"group_size": null, "bits": 3}.
  {
    json q = llama_min();
    q["quantization"] = json::parse(R"({"group_size": 64, "bits": 4, "mode": "affine",
        "model.layers.0.mlp.down_proj": {"group_size": null, "bits": 6, "mode": "affine"},
        "model.layers.0.mlp.up_proj": {"group_size": null, "bits": null, "mode": "mxfp4"}})");
    auto m = parse_model_config(q, "c");
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->quantization->spec_for("model.layers.0.mlp.down_proj"),
              (QuantSpec{QuantMode::kAffine, 6, 64}));
    EXPECT_EQ(m->quantization->spec_for("model.layers.0.mlp.up_proj"),
              (QuantSpec{QuantMode::kMxfp4, 4, 32}));
  }
  json j = llama_min();
  j["quantization_config"] = {{"group_size", 32}, {"bits", 8}};
  auto r = parse_model_config(j, "c");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->quantization->global, (QuantSpec{QuantMode::kAffine, 8, 32}));
}

TEST(ModelConfig, LoadFromFile) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("config.json"), llama_min().dump());
  auto r = load_model_config(tmp.file("config.json"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->hidden_size, 64);
  testing::write_file(tmp.file("bad.json"), "{\"model_type\": ");
  auto b = load_model_config(tmp.file("bad.json"));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message.rfind(tmp.file("bad.json") + ": invalid JSON", 0), 0u)
      << b.error().message;
  EXPECT_TRUE(contains(load_model_config(tmp.file("none.json")).error().message, "cannot open"));
}

}  // namespace
}  // namespace tq
