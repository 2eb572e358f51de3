#include "recipe/quant_plan.h"

#include <gtest/gtest.h>

#include <set>

namespace tq {
namespace {

// SmolLM2-135M's geometry: hidden 576 (= 4.5 x 128), MLP 1536, 30 layers, tied embeddings.
ModelConfig smollm2() {
  ModelConfig c;
  c.family = Family::kLlama;
  c.model_type = "llama";
  c.hidden_size = 576;
  c.num_hidden_layers = 30;
  c.intermediate_size = 1536;
  c.num_attention_heads = 9;
  c.num_key_value_heads = 3;
  c.head_dim = 64;
  c.vocab_size = 49152;
  c.tie_word_embeddings = true;
  return c;
}

ModelConfig tiny(bool tied = false) {
  ModelConfig c = smollm2();
  c.hidden_size = 128;
  c.num_hidden_layers = 2;
  c.intermediate_size = 256;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.vocab_size = 320;
  c.tie_word_embeddings = tied;
  return c;
}

const PlanEntry& entry(const QuantPlan& p, const std::string& name) {
  for (const auto& e : p.entries)
    if (e.name == name) return e;
  ADD_FAILURE() << "no entry " << name;
  return p.entries.front();
}

std::string plan_error(const ModelConfig& c, const PlanOptions& o) {
  auto p = build_plan(c, o);
  EXPECT_FALSE(p.ok());
  return p.ok() ? std::string() : p.error().message;
}

TEST(QuantPlan, DefaultIsAffine4BitG64WithExactMlxLmSize) {
  PlanOptions o;
  o.dtype = DType::kBF16;
  auto p = build_plan(tiny(), o);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->global, (QuantSpec{QuantMode::kAffine, 4, 64}));
  // 2 layers of q,k,v,o (128x128, 64x128 x2, 128x128), gate/up (256x128), down (128x256),
  // embed and lm_head (320x128), 5 norms of 128.
  const uint64_t quantized = 2 * (128 * 128 * 2 + 64 * 128 * 2 + 256 * 128 * 3) + 2 * 320 * 128;
  const uint64_t norms = 5 * 128;
  SizeStats s = p->size();
  EXPECT_EQ(s.params, quantized + norms);
  // 4 bits per weight + a bf16 scale and bias per 64 weights; norms in bf16.
  EXPECT_EQ(s.bytes, quantized / 2 + quantized / 64 * 4 + norms * 2);
  EXPECT_DOUBLE_EQ(s.bpw, 8.0 * s.bytes / s.params);
  // Stored tensors: U32 packed weight + scales + biases per module.
  std::set<std::string> names;
  for (const auto& d : p->stored_tensors()) names.insert(d.name);
  EXPECT_TRUE(names.count("lm_head.scales"));
  EXPECT_TRUE(names.count("model.layers.1.mlp.down_proj.biases"));
  EXPECT_TRUE(names.count("model.norm.weight"));
  EXPECT_FALSE(names.count("model.norm.scales"));
  for (const auto& d : p->stored_tensors())
    if (d.name == "model.layers.0.mlp.down_proj.weight") {
      EXPECT_EQ(d.dtype, DType::kU32);
      EXPECT_EQ(d.shape, (Shape{128, 256 * 4 / 32}));
    }
  EXPECT_TRUE(p->overrides().empty());
  EXPECT_EQ(p->quantization_json().dump(), R"({"bits":4,"group_size":64,"mode":"affine"})");
}

TEST(QuantPlan, FpModesTakeTheirDefaultsAndU8Scales) {
  for (auto [mode, bits, group] :
       {std::tuple{QuantMode::kMxfp4, 4, 32}, std::tuple{QuantMode::kNvfp4, 4, 16},
        std::tuple{QuantMode::kMxfp8, 8, 32}}) {
    PlanOptions o;
    o.mode = mode;
    auto p = build_plan(tiny(), o);
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(p->global, (QuantSpec{mode, bits, group}));
    for (const auto& d : p->stored_tensors()) {
      EXPECT_EQ(d.name.find(".biases"), std::string::npos) << d.name;
      if (d.name.ends_with(".scales")) {
        EXPECT_EQ(d.dtype, DType::kU8);
      }
    }
    // An embedding row of 128 weights: bits + one 8-bit scale per group.
    const PlanEntry& e = entry(*p, "model.embed_tokens.weight");
    EXPECT_EQ(quantized_bytes(*e.spec, 320, 128, DType::kBF16),
              320u * 128 * bits / 8 + 320u * 128 / group);
  }
}

TEST(QuantPlan, BadOptionsAreOneLineNamingTheFlag) {
  PlanOptions o;
  o.bits = 7;
  EXPECT_EQ(plan_error(tiny(), o),
            "--bits 7: affine quantization does not support 7 bits (supported: 1, 2, 3, 4, 5, "
            "6, 8)");
  o = {};
  o.group_size = 48;
  EXPECT_EQ(plan_error(tiny(), o),
            "--group-size 48: affine quantization does not support group size 48 (supported: "
            "32, 64, 128)");
  o = {};
  o.mode = QuantMode::kNvfp4;
  o.group_size = 32;
  EXPECT_EQ(plan_error(tiny(), o),
            "--mode nvfp4 --group-size 32: nvfp4 quantization requires group size 16, got 32");
  o = {};
  o.dtype = DType::kU8;
  EXPECT_NE(plan_error(tiny(), o).find("--dtype U8"), std::string::npos);
}

TEST(QuantPlan, IndivisibleInputWidthNamesTheModuleAndHowToChoose) {
  PlanOptions o;
  o.group_size = 128;
  std::string e = plan_error(smollm2(), o);
  EXPECT_EQ(e.rfind("model.embed_tokens: input width 576 is not a multiple of the group size 128 "
                    "(affine 4-bit g128, from default); give it a smaller group (recipe rule "
                    "{\"match\": \"model.embed_tokens\", \"group_size\": 64}, or --group-size "
                    "64) or keep it float (--keep-float 'model.embed_tokens') (",
                    0),
            0u)
      << e;
  // q, k, v, o, gate, up of 30 layers (down_proj's 1536 inputs divide) after the embedding.
  EXPECT_NE(e.find("180 more modules have the same problem, e.g. "
                   "model.layers.0.self_attn.q_proj"),
            std::string::npos)
      << e;
  // A recipe giving those modules group 64 resolves it; down_proj stays at 128.
  auto r = parse_recipe(nlohmann::json::parse(R"({"rules": [
      {"match": "model.layers.*.mlp.down_proj", "group_size": 128},
      {"match": "*", "group_size": 64}]})"),
                        "r.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  o.recipe = *r;
  auto p = build_plan(smollm2(), o);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(entry(*p, "model.layers.7.mlp.down_proj.weight").spec->group_size, 128);
  EXPECT_EQ(entry(*p, "model.layers.7.mlp.up_proj.weight").spec->group_size, 64);
  EXPECT_EQ(entry(*p, "model.layers.7.mlp.up_proj.weight").decided_by, "r.json rule 2");
  // Keeping the module float resolves it for the embedding, not for the rest.
  o.recipe.reset();
  o.keep_float = {"model.embed_tokens"};
  e = plan_error(smollm2(), o);
  EXPECT_EQ(e.rfind("model.layers.0.self_attn.q_proj: input width 576", 0), 0u) << e;
}

TEST(QuantPlan, RulesMatchGlobRegexRoleAndLayersFirstMatchWins) {
  auto r = parse_recipe(nlohmann::json::parse(R"({"bits": 3, "rules": [
      {"match": "lm_head", "bits": 8},
      {"match": "role:attn_v", "layers": [1], "mode": "mxfp8"},
      {"match": "re:model\\.layers\\.[0-9]+\\.mlp\\.(gate|up)_proj", "bits": 5, "group_size": 32},
      {"match": "model.embed_tokens", "float": true},
      {"match": "model.layers.?.mlp.*", "bits": 2}]})"),
                        "rec.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  PlanOptions o;
  o.recipe = *r;
  o.keep_float = {"model.layers.0.self_attn.o_proj"};
  auto p = build_plan(tiny(), o);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->global, (QuantSpec{QuantMode::kAffine, 3, 64}));
  EXPECT_EQ(*entry(*p, "lm_head.weight").spec, (QuantSpec{QuantMode::kAffine, 8, 64}));
  EXPECT_EQ(*entry(*p, "model.layers.1.self_attn.v_proj.weight").spec,
            (QuantSpec{QuantMode::kMxfp8, 8, 32}));
  EXPECT_EQ(*entry(*p, "model.layers.0.self_attn.v_proj.weight").spec, p->global);
  EXPECT_EQ(*entry(*p, "model.layers.0.mlp.up_proj.weight").spec,
            (QuantSpec{QuantMode::kAffine, 5, 32}));
  EXPECT_EQ(*entry(*p, "model.layers.0.mlp.down_proj.weight").spec,
            (QuantSpec{QuantMode::kAffine, 2, 64}));
  EXPECT_FALSE(entry(*p, "model.embed_tokens.weight").spec);
  EXPECT_FALSE(entry(*p, "model.layers.0.self_attn.o_proj.weight").spec);
  EXPECT_EQ(entry(*p, "model.layers.0.self_attn.o_proj.weight").decided_by,
            "--keep-float 'model.layers.0.self_attn.o_proj'");
  EXPECT_TRUE(entry(*p, "model.layers.1.self_attn.o_proj.weight").spec);
  // Overrides hold full dicts for the differing modules only.
  nlohmann::json q = p->quantization_json();
  EXPECT_EQ(q["model.layers.1.self_attn.v_proj"].dump(),
            R"({"bits":8,"group_size":32,"mode":"mxfp8"})");
  EXPECT_FALSE(q.contains("model.layers.0.self_attn.v_proj"));
  EXPECT_FALSE(q.contains("model.embed_tokens"));  // float: no .scales is enough for mlx-lm
  EXPECT_EQ(p->modules_json()["model.embed_tokens"], "float");
  // The float embedding counts all its params at the dtype's size.
  bool found = false;
  for (const auto& t : p->logical_tensors())
    if (t.name == "model.embed_tokens.weight") {
      found = true;
      EXPECT_EQ(t.stored_bytes, 320u * 128 * 2);
      EXPECT_FALSE(t.mlx_quant);
    }
  EXPECT_TRUE(found);
}

TEST(QuantPlan, RuleMatchingNothingAndInvalidRuleSpecsAreErrors) {
  PlanOptions o;
  auto r = parse_recipe(nlohmann::json::parse(R"({"rules": [{"match": "*.w_proj", "bits": 6}]})"),
                        "rec.json");
  ASSERT_TRUE(r.ok());
  o.recipe = *r;
  EXPECT_EQ(plan_error(tiny(), o),
            "rec.json rule 1: matches no quantizable module of this llama model (match "
            "'*.w_proj')");
  o.recipe.reset();
  o.keep_float = {"lm_head"};
  EXPECT_EQ(plan_error(tiny(/*tied=*/true), o),
            "--keep-float 'lm_head': matches no quantizable module of this llama model (match "
            "'lm_head')");
  o.keep_float.clear();
  r = parse_recipe(nlohmann::json::parse(R"({"rules": [{"match": "lm_head", "bits": 7}]})"),
                   "rec.json");
  ASSERT_TRUE(r.ok());
  o.recipe = *r;
  EXPECT_EQ(plan_error(tiny(), o),
            "rec.json rule 1: affine quantization does not support 7 bits (supported: 1, 2, 3, "
            "4, 5, 6, 8)");
  // A norm is never quantized, so a rule on it matches no quantizable module.
  r = parse_recipe(nlohmann::json::parse(R"({"rules": [{"match": "role:norm_final", "bits": 4}]})"),
                   "rec.json");
  ASSERT_TRUE(r.ok());
  o.recipe = *r;
  EXPECT_NE(plan_error(tiny(), o).find("matches no quantizable module"), std::string::npos);
}

// mlx-lm's mixed_quant_predicate_builder for 30 layers: L//8 = 3, 7L//8 = 26.
TEST(QuantPlan, MixedPresetsFollowMlxLm) {
  auto r = preset_recipe("mixed_3_6", 30, 64);
  ASSERT_TRUE(r.ok()) << r.error().message;
  PlanOptions o;
  o.recipe = *r;
  auto p = build_plan(smollm2(), o);
  ASSERT_TRUE(p.ok()) << p.error().message;
  std::set<int64_t> high = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29};
  for (int64_t l = 0; l < 30; ++l) {
    for (const char* m : {"self_attn.v_proj", "mlp.down_proj"}) {
      const PlanEntry& e = entry(*p, fmt::format("model.layers.{}.{}.weight", l, m));
      EXPECT_EQ(e.spec->bits, high.count(l) ? 6 : 3) << e.name;
    }
    EXPECT_EQ(entry(*p, fmt::format("model.layers.{}.self_attn.k_proj.weight", l)).spec->bits, 3);
  }
  EXPECT_EQ(entry(*p, "model.embed_tokens.weight").spec->bits, 3);
  EXPECT_EQ(p->global, (QuantSpec{QuantMode::kAffine, 3, 64}));
  // Untied: lm_head gets the high bits.
  auto r2 = preset_recipe("mixed_2_6", 2, 32);
  ASSERT_TRUE(r2.ok());
  o.recipe = *r2;
  auto p2 = build_plan(tiny(), o);
  ASSERT_TRUE(p2.ok()) << p2.error().message;
  EXPECT_EQ(*entry(*p2, "lm_head.weight").spec, (QuantSpec{QuantMode::kAffine, 6, 32}));
  EXPECT_EQ(*entry(*p2, "model.layers.0.mlp.up_proj.weight").spec,
            (QuantSpec{QuantMode::kAffine, 2, 32}));
  // L = 2: L//8 = 0, 7L//8 = 1, so layer 1 gets more bits and layer 0 ((0-0)%3 = 0) does not.
  EXPECT_EQ(entry(*p2, "model.layers.0.mlp.down_proj.weight").spec->bits, 2);
  EXPECT_EQ(entry(*p2, "model.layers.1.mlp.down_proj.weight").spec->bits, 6);
  EXPECT_FALSE(preset_recipe("mixed_5_6", 2, 64).ok());
}

}  // namespace
TEST(QuantPlan, MinBitsRulesRaiseAffineSpecsAndDoNotPin) {
  auto r = parse_recipe(nlohmann::json::parse(R"({"bits": 3, "rules": [
      {"match": "role:attn_v", "min_bits": 5},
      {"match": "role:mlp_down", "bits": 2},
      {"match": "role:mlp_down", "min_bits": 4}]})"),
                        "m.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  PlanOptions o;
  o.dtype = DType::kBF16;
  o.recipe = *r;
  auto p = build_plan(tiny(), o);
  ASSERT_TRUE(p.ok()) << p.error().message;
  const PlanEntry& v = entry(*p, "model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(v.spec->bits, 5);
  EXPECT_EQ(v.min_bits, 5);
  EXPECT_FALSE(v.pinned);  // allocation still chooses it (among >= 5 bits)
  const PlanEntry& d = entry(*p, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(d.spec->bits, 4);  // the pinning rule says 2, the minimum wins
  EXPECT_TRUE(d.pinned);
  EXPECT_EQ(entry(*p, "model.layers.0.self_attn.q_proj.weight").spec->bits, 3);
  EXPECT_EQ(r->to_json()["rules"][0]["min_bits"], 5);

  // A minimum above an fp mode's fixed width, and bad rules, are one-line errors.
  o.recipe.reset();
  o.mode = QuantMode::kMxfp4;
  auto fp = parse_recipe(nlohmann::json::parse(R"({"rules": [
      {"match": "role:attn_v", "min_bits": 6}]})"),
                         "f.json");
  ASSERT_TRUE(fp.ok());
  o.recipe = *fp;
  EXPECT_NE(plan_error(tiny(), o).find("min_bits 6"), std::string::npos);
  for (const char* bad : {R"({"rules": [{"match": "*", "min_bits": 9}]})",
                          R"({"rules": [{"match": "*", "min_bits": 4, "bits": 3}]})"}) {
    auto b = parse_recipe(nlohmann::json::parse(bad), "b.json");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.error().message.find("min_bits"), std::string::npos) << b.error().message;
  }
}

}  // namespace tq
