#include "model/tensor_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "../testing/test_files.h"

namespace tq {
namespace {

using testing::contains;

ModelConfig tiny(Family f) {
  ModelConfig c;
  c.family = f;
  c.hidden_size = 64;
  c.num_hidden_layers = 3;
  c.intermediate_size = 96;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = f == Family::kQwen3 ? 32 : 16;
  c.vocab_size = 300;
  c.attention_bias = f == Family::kQwen2;
  return c;
}

// An in-memory TensorSource listing (name, shape) pairs; no data.
class FakeSource : public TensorSource {
 public:
  explicit FakeSource(std::vector<TensorInfo> t) : t_(std::move(t)) {
    std::sort(t_.begin(), t_.end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  }
  const std::string& path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override { return t_; }
  Result<FloatTensor> load_f32(const std::string& name) const override {
    return err("fake: no data");
  }

 private:
  std::string path_ = "fake-dir";
  std::vector<TensorInfo> t_;
};

std::vector<TensorInfo> infos_of(const std::vector<TensorSpec>& specs) {
  std::vector<TensorInfo> out;
  for (const auto& s : specs) out.push_back(TensorInfo{s.name, s.shape, "F32"});
  return out;
}

const TensorSpec* find_spec(const std::vector<TensorSpec>& v, const std::string& name) {
  for (const auto& s : v)
    if (s.name == name) return &s;
  return nullptr;
}

TEST(TensorTable, LlamaExpectedTensors) {
  ModelConfig c = tiny(Family::kLlama);
  auto specs = expected_tensors(c);
  EXPECT_EQ(specs.size(), 2u + 3u * 9u);  // embed + norm, 9 per layer, tied: no lm_head
  EXPECT_EQ(specs.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(specs[1].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(specs.back().name, "model.norm.weight");
  const TensorSpec* q = find_spec(specs, "model.layers.2.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (Shape{64, 64}));
  EXPECT_EQ(q->layer, 2);
  EXPECT_EQ(q->kind->role, TensorRole::kAttnQ);
  EXPECT_EQ(q->kind->fed_by, TensorRole::kNormAttn);
  EXPECT_EQ(find_spec(specs, "model.layers.0.self_attn.k_proj.weight")->shape, (Shape{32, 64}));
  EXPECT_EQ(find_spec(specs, "model.layers.0.mlp.down_proj.weight")->shape, (Shape{64, 96}));
  EXPECT_EQ(find_spec(specs, "model.embed_tokens.weight")->shape, (Shape{300, 64}));
  EXPECT_EQ(find_spec(specs, "lm_head.weight"), nullptr);

  c.tie_word_embeddings = false;
  c.attention_bias = true;
  c.mlp_bias = true;
  specs = expected_tensors(c);
  EXPECT_EQ(specs.size(), 3u + 3u * 16u);
  EXPECT_EQ(specs.back().name, "lm_head.weight");
  EXPECT_EQ(find_spec(specs, "lm_head.weight")->shape, (Shape{300, 64}));
  EXPECT_EQ(find_spec(specs, "model.layers.1.self_attn.o_proj.bias")->shape, Shape{64});
  EXPECT_EQ(find_spec(specs, "model.layers.1.mlp.gate_proj.bias")->shape, Shape{96});
  EXPECT_EQ(find_spec(specs, "model.layers.1.self_attn.v_proj.bias")->shape, Shape{32});
}

TEST(TensorTable, Qwen2AndQwen3) {
  auto q2 = expected_tensors(tiny(Family::kQwen2));
  EXPECT_EQ(q2.size(), 2u + 3u * 12u);
  EXPECT_NE(find_spec(q2, "model.layers.0.self_attn.k_proj.bias"), nullptr);
  EXPECT_EQ(find_spec(q2, "model.layers.0.self_attn.o_proj.bias"), nullptr);
  EXPECT_EQ(find_spec(q2, "model.layers.0.mlp.up_proj.bias"), nullptr);

  ModelConfig c3 = tiny(Family::kQwen3);
  auto q3 = expected_tensors(c3);
  EXPECT_EQ(q3.size(), 2u + 3u * 11u);
  // head_dim 32 != hidden/heads: q is [heads*head_dim, hidden], o its transpose.
  EXPECT_EQ(find_spec(q3, "model.layers.0.self_attn.q_proj.weight")->shape, (Shape{128, 64}));
  EXPECT_EQ(find_spec(q3, "model.layers.0.self_attn.o_proj.weight")->shape, (Shape{64, 128}));
  EXPECT_EQ(find_spec(q3, "model.layers.0.self_attn.v_proj.weight")->shape, (Shape{64, 64}));
  EXPECT_EQ(find_spec(q3, "model.layers.0.self_attn.q_norm.weight")->shape, Shape{32});
  EXPECT_EQ(find_spec(q3, "model.layers.0.self_attn.q_proj.bias"), nullptr);
}

TEST(TensorTable, ClassifyRoundTripsEveryExpectedName) {
  for (Family f : {Family::kLlama, Family::kQwen2, Family::kQwen3}) {
    ModelConfig c = tiny(f);
    c.tie_word_embeddings = false;
    c.attention_bias = f != Family::kQwen3;
    c.mlp_bias = f == Family::kLlama;
    for (const auto& s : expected_tensors(c)) {
      auto k = classify(s.name, f);
      ASSERT_TRUE(k.has_value()) << s.name;
      EXPECT_EQ(k->kind, s.kind) << s.name;
      EXPECT_EQ(k->layer, s.layer) << s.name;
    }
  }
}

TEST(TensorTable, ClassifyRejectsNearMisses) {
  auto c = classify("model.layers.12.mlp.down_proj.weight", Family::kLlama);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->kind->role, TensorRole::kMlpDown);
  EXPECT_EQ(c->layer, 12);
  EXPECT_EQ(tensor_role_name(c->kind->role), "mlp_down");
  for (const char* bad :
       {"model.layers.01.mlp.down_proj.weight", "model.layers..mlp.down_proj.weight",
        "model.layers.x.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weights",
        "model.layers.1.2.mlp.down_proj.weight", "model.layers.1234567890.mlp.down_proj.weight",
        "lm_head.bias", "model.embed_tokens.scales", ""})
    EXPECT_FALSE(classify(bad, Family::kLlama).has_value()) << bad;
  EXPECT_FALSE(classify("model.layers.0.self_attn.q_norm.weight", Family::kLlama).has_value());
  EXPECT_TRUE(classify("model.layers.0.self_attn.q_norm.weight", Family::kQwen3).has_value());
  auto inv = classify("model.layers.3.self_attn.rotary_emb.inv_freq", Family::kQwen2);
  ASSERT_TRUE(inv.has_value());
  EXPECT_EQ(inv->kind->role, TensorRole::kRopeInvFreq);
}

TEST(TensorTable, TableInvariants) {
  for (Family f : {Family::kLlama, Family::kQwen2, Family::kQwen3}) {
    std::set<std::string_view> patterns;
    for (const TensorKind& k : family_table(f)) {
      EXPECT_TRUE(patterns.insert(k.pattern).second) << k.pattern;
      if (k.quantizable) {
        EXPECT_EQ(k.dims.size(), 2u) << k.pattern;
      }
      if (k.side == ResidualSide::kReads) {
        EXPECT_EQ(k.col_space, Space::kResidual) << k.pattern;
        EXPECT_TRUE(k.fed_by.has_value()) << k.pattern;
      }
      if (k.dims.size() == 1) {
        EXPECT_EQ(k.col_space, Space::kNone) << k.pattern;
      }
    }
  }
  // R2 touches exactly v_proj rows, its bias and o_proj columns.
  auto spaces = [](std::string_view name) {
    auto c = classify(name, Family::kQwen2);
    return std::make_pair(c->kind->row_space, c->kind->col_space);
  };
  EXPECT_EQ(spaces("model.layers.0.self_attn.v_proj.weight"),
            std::make_pair(Space::kHeadValue, Space::kResidual));
  EXPECT_EQ(spaces("model.layers.0.self_attn.v_proj.bias"),
            std::make_pair(Space::kHeadValue, Space::kNone));
  EXPECT_EQ(spaces("model.layers.0.self_attn.o_proj.weight"),
            std::make_pair(Space::kResidual, Space::kHeadValue));
  EXPECT_EQ(classify("model.embed_tokens.weight", Family::kQwen3)->kind->side,
            ResidualSide::kWrites);
  EXPECT_EQ(classify("lm_head.weight", Family::kQwen3)->kind->fed_by, TensorRole::kNormFinal);
}

TEST(TensorTable, CheckAgainstConfig) {
  ModelConfig c = tiny(Family::kQwen3);
  c.tie_word_embeddings = true;
  auto infos = infos_of(expected_tensors(c));
  EXPECT_TRUE(check_tensors_against_config(c, FakeSource(infos)).ok());

  auto extra = infos;
  extra.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {16}, "F32"});
  extra.push_back({"lm_head.weight", {300, 64}, "BF16"});
  auto rep = compare_tensors_with_config(c, FakeSource(extra));
  EXPECT_TRUE(rep.ok());
  EXPECT_EQ(rep.ignored.size(), 2u);

  auto bad = infos;
  bad.erase(bad.begin() + 3);                                             // something missing
  bad.push_back({"model.layers.3.mlp.up_proj.weight", {96, 64}, "F32"});  // layer past the end
  bad.push_back({"model.layers.0.self_attn.q_proj.bias", {128}, "F32"});  // qwen3 has none
  bad.push_back({"model.foo", {1}, "F32"});
  for (auto& t : bad)
    if (t.name == "model.norm.weight") t.shape = {65};
  TensorInfo qlm{"lm_head.weight", {300, 64}, "affine"};
  qlm.mlx_quant = QuantSpec{};
  bad.push_back(qlm);
  for (auto& t : bad)
    if (t.name == "model.layers.1.input_layernorm.weight") t.mlx_quant = QuantSpec{};
  rep = compare_tensors_with_config(c, FakeSource(bad));
  EXPECT_FALSE(rep.ok());
  EXPECT_EQ(rep.missing.size(), 1u);
  EXPECT_EQ(rep.unexpected.size(), 4u);
  ASSERT_EQ(rep.mismatched.size(), 2u);
  EXPECT_TRUE(contains(rep.mismatched[0] + rep.mismatched[1],
                       "model.norm.weight: shape [65], expected [64]"));
  EXPECT_TRUE(contains(rep.mismatched[0] + rep.mismatched[1], "stored quantized"));
  bool saw_layer = false, saw_lm = false;
  for (const auto& u : rep.unexpected) {
    saw_layer |= contains(u, "layer 3 >= num_hidden_layers 3");
    saw_lm |= contains(u, "quantized lm_head with tied embeddings");
  }
  EXPECT_TRUE(saw_layer);
  EXPECT_TRUE(saw_lm);
  Status st = check_tensors_against_config(c, FakeSource(bad));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(
      contains(st.error().message, "fake-dir: tensors do not match the qwen3 config: 1 missing ("))
      << st.error().message;
  EXPECT_TRUE(contains(st.error().message, "4 unexpected")) << st.error().message;

  c.tie_word_embeddings = false;  // untied: lm_head must be there
  rep = compare_tensors_with_config(c, FakeSource(infos));
  EXPECT_EQ(rep.missing, std::vector<std::string>{"lm_head.weight"});
}

}  // namespace
}  // namespace tq
