// Fold plan per family and the fold-parity gate on tiny checkpoints: the folded float model
// (f32) computes the source's function through our reference forward pass (mean KL < 1e-6, no
// argmax flip except at exact ties).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <random>

#include "../testing/test_files.h"
#include "convert/convert.h"
#include "convert/fold_float.h"
#include "io/safetensors.h"
#include "model/forward.h"
#include "quant/rtn_quantizer.h"
#include "rotate/rotation_transform.h"

namespace tq {
namespace {

using testing::contains;

nlohmann::json tiny_json(const std::string& type, bool tied) {
  nlohmann::json j = {{"model_type", type},
                      {"hidden_size", 48},  // 12·4: Paley I ⊗ Sylvester
                      {"num_hidden_layers", 2},
                      {"intermediate_size", 80},
                      {"num_attention_heads", 6},
                      {"num_key_value_heads", 2},
                      {"head_dim", 8},
                      {"rms_norm_eps", 1e-5},
                      {"vocab_size", 70},
                      {"max_position_embeddings", 256},
                      {"rope_theta", 10000.0},
                      {"tie_word_embeddings", tied}};
  if (type == "llama") {
    j["attention_bias"] = !tied;
    j["mlp_bias"] = !tied;
  }
  if (type == "qwen2") j.erase("head_dim");
  if (type == "qwen3_5") {  // layer 0 Gated DeltaNet (Hv 4 > Hk 2), layer 1 gated attention
    j["full_attention_interval"] = 2;
    j["linear_num_key_heads"] = 2;
    j["linear_num_value_heads"] = 4;
    j["linear_key_head_dim"] = 8;
    j["linear_value_head_dim"] = 8;
    j["linear_conv_kernel_dim"] = 4;
    j["rope_parameters"] = {{"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
  }
  if (type == "qwen3") {  // 40 = 20·2 and head_dim 16 != hidden/heads
    j["hidden_size"] = 40;
    j["num_attention_heads"] = 4;
    j["head_dim"] = 16;
  }
  return j;
}

// Seeded weights with outlier channels and non-trivial gains, as f32 safetensors.
std::string write_tiny_model(const testing::TempDir& dir, const nlohmann::json& cfg_json) {
  auto cfg = parse_model_config(cfg_json, "config.json");
  EXPECT_TRUE(cfg.ok()) << cfg.error().message;
  std::vector<TensorSpec> specs = expected_tensors(*cfg);
  std::vector<TensorDecl> decls;
  for (const auto& s : specs) decls.push_back({s.name, DType::kF32, s.shape});
  std::string path = dir.file("src");
  std::filesystem::create_directories(path);
  auto w = ShardedWriter::create(path, decls, {});
  EXPECT_TRUE(w.ok()) << w.error().message;
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  for (const auto& s : specs) {
    std::vector<float> v(shape_numel(s.shape));
    for (auto& x : v) x = nd(rng);
    if (s.shape.size() == 1 && s.kind->fed_by == std::nullopt &&
        s.name.find("norm") != std::string::npos)
      for (auto& x : v) x = 1.0f + 2.0f * x;
    if (s.shape.size() == 2) {
      const int64_t cols = s.shape[1];
      for (int64_t r = 0; r < s.shape[0]; ++r) v[r * cols + 3 % cols] *= 15.0f;  // outlier column
    }
    EXPECT_TRUE((*w)->write(s.name, testing::as_bytes(v)).ok());
  }
  EXPECT_TRUE((*w)->finish().ok());
  testing::write_file(path + "/config.json", cfg_json.dump());
  return path;
}

std::vector<double> log_softmax(std::span<const float> l) {
  double mx = *std::max_element(l.begin(), l.end()), s = 0;
  for (float x : l) s += std::exp(double(x) - mx);
  std::vector<double> out(l.size());
  for (size_t i = 0; i < l.size(); ++i) out[i] = double(l[i]) - mx - std::log(s);
  return out;
}

struct Parity {
  double mean_kl = 0, max_kl = 0;
  int flips = 0;
};

Result<std::vector<float>> run_logits(const std::string& path, const std::vector<int32_t>& ids) {
  TQ_TRY(ModelSource src, open_model(path));
  TQ_TRY(auto t, Transformer::load(src, RuntimeOptions{.reference = true}));
  KvCache cache = t->new_cache(static_cast<int64_t>(ids.size()));
  std::vector<float> logits(ids.size() * t->config().vocab_size);
  TQ_CHECK_OK(t->forward(ids, cache, logits));
  return logits;
}

Parity compare(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  Parity p;
  const int64_t rows = static_cast<int64_t>(a.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    std::span<const float> la(a.data() + r * vocab, vocab), lb(b.data() + r * vocab, vocab);
    std::vector<double> pa = log_softmax(la), pb = log_softmax(lb);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) kl += std::exp(pa[i]) * (pa[i] - pb[i]);
    p.mean_kl += kl / rows;
    p.max_kl = std::max(p.max_kl, kl);
    auto ia = std::max_element(la.begin(), la.end()) - la.begin();
    auto ib = std::max_element(lb.begin(), lb.end()) - lb.begin();
    if (ia != ib && la[ia] != la[ib]) ++p.flips;  // a flip between exactly tied logits is fine
  }
  return p;
}

struct ParityCase {
  std::string family;
  bool tied;
  RotationKind r1, r2;
  FoldDType fold;
};

void PrintTo(const ParityCase& c, std::ostream* os) {
  *os << c.family << (c.tied ? " tied" : " untied") << " r1 " << rotation_kind_name(c.r1) << " r2 "
      << rotation_kind_name(c.r2);
}

class FoldParity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(FoldParity, FoldedFloatModelComputesTheSameFunction) {
  const ParityCase& c = GetParam();
  testing::TempDir dir;
  nlohmann::json cj = tiny_json(c.family, c.tied);
  std::string src = write_tiny_model(dir, cj);
  std::string dst = dir.file("folded");
  RotationOptions opts{.r1 = c.r1, .r2 = c.r2, .seed = 17, .fold_dtype = c.fold};
  Status st = write_folded_float(src, opts, dst);
  ASSERT_TRUE(st.ok()) << st.error().message;

  std::vector<int32_t> ids;
  std::mt19937 rng(5);
  for (int i = 0; i < 48; ++i) ids.push_back(static_cast<int32_t>(rng() % 70));
  auto a = run_logits(src, ids), b = run_logits(dst, ids);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  Parity p = compare(*a, *b, 70);
  std::printf("mean KL %.3g, max KL %.3g, flips %d\n", p.mean_kl, p.max_kl, p.flips);
  EXPECT_LT(p.mean_kl, 1e-6);
  EXPECT_EQ(p.flips, 0);

  // The folded tensors: gains are ones, lm_head exists, the residual basis really moved.
  auto s0 = open_model(src), s1 = open_model(dst);
  ASSERT_TRUE(s0.ok() && s1.ok());
  // Untie and γ-fold only serve R1: without it the model keeps its tie and its gains.
  const bool r1_on = c.r1 != RotationKind::kNone;
  EXPECT_EQ(s1->config.tie_word_embeddings, c.tied && !r1_on);
  for (const auto& t : s1->tensors->tensors()) {
    auto k = classify(t.name, s1->config.family);
    ASSERT_TRUE(k) << t.name;
    auto after = s1->tensors->load_f32(t.name);
    ASSERT_TRUE(after.ok());
    const bool gain = k->kind->role == TensorRole::kNormAttn ||
                      k->kind->role == TensorRole::kNormMlp ||
                      k->kind->role == TensorRole::kNormFinal;
    if (gain && r1_on) {
      for (float x : after->data) ASSERT_EQ(x, 1.0f) << t.name;
    }
    if (gain && !r1_on) {
      auto before = s0->tensors->load_f32(t.name);
      ASSERT_TRUE(before.ok());
      EXPECT_EQ(before->data, after->data) << t.name;
    }
    const TensorRole role = k->kind->role;
    if (role == TensorRole::kQNorm || role == TensorRole::kAttnQBias ||
        role == TensorRole::kAttnKBias || role == TensorRole::kLinConv ||
        role == TensorRole::kLinALog || role == TensorRole::kLinDtBias ||
        role == TensorRole::kLinNorm) {  // head / DeltaNet-inner space: no fold touches them
      auto before = s0->tensors->load_f32(t.name);
      ASSERT_TRUE(before.ok());
      EXPECT_EQ(before->data, after->data) << t.name;
    }
    if (k->kind->role == TensorRole::kEmbed && c.r1 != RotationKind::kNone) {
      auto before = s0->tensors->load_f32(t.name);
      ASSERT_TRUE(before.ok());
      EXPECT_NE(before->data, after->data);
    }
  }
  auto meta = nlohmann::json::parse(testing::read_file(dst + "/tq_metadata.json"));
  ASSERT_EQ(meta["transforms"].size(), 1u);
  EXPECT_EQ(meta["transforms"][0]["seed"], 17);
  EXPECT_EQ(meta["transforms"][0]["r1"]["kind"], rotation_kind_name(c.r1));
}

std::string case_name(const ::testing::TestParamInfo<ParityCase>& i) {
  const ParityCase& c = i.param;
  return c.family + (c.tied ? "_tied_" : "_untied_") + std::string(rotation_kind_name(c.r1)) + "_" +
         std::string(rotation_kind_name(c.r2)) + (c.fold == FoldDType::kF64 ? "_f64" : "");
}

using RK = RotationKind;
INSTANTIATE_TEST_SUITE_P(
    Families, FoldParity,
    ::testing::Values(ParityCase{"llama", false, RK::kHadamard, RK::kHadamard, FoldDType::kF32},
                      ParityCase{"llama", true, RK::kHadamard, RK::kHadamard, FoldDType::kF32},
                      ParityCase{"qwen2", true, RK::kHadamard, RK::kHadamard, FoldDType::kF32},
                      ParityCase{"qwen3", false, RK::kHadamard, RK::kHadamard, FoldDType::kF32},
                      ParityCase{"qwen3", true, RK::kRandom, RK::kRandom, FoldDType::kF32},
                      ParityCase{"llama", false, RK::kRandom, RK::kRandom, FoldDType::kF64},
                      ParityCase{"qwen2", true, RK::kHadamard, RK::kNone, FoldDType::kF64},
                      ParityCase{"llama", true, RK::kNone, RK::kHadamard, FoldDType::kF32},
                      ParityCase{"qwen2", false, RK::kNone, RK::kNone, FoldDType::kF32},
                      ParityCase{"qwen3_5", true, RK::kHadamard, RK::kHadamard, FoldDType::kF32},
                      ParityCase{"qwen3_5", false, RK::kRandom, RK::kNone, FoldDType::kF64}),
    case_name);

ModelConfig config_of(const nlohmann::json& j) {
  auto c = parse_model_config(j, "config.json");
  EXPECT_TRUE(c.ok()) << c.error().message;
  return *c;
}

std::vector<FoldOp> ops_of(const FoldPlan& p, TensorRole role) {
  for (const auto* list : {&p.globals, &p.layer})
    for (const auto& f : *list)
      if (f.kind->role == role) {
        std::vector<FoldOp> ops;
        for (const auto& s : f.steps) ops.push_back(s.op);
        return ops;
      }
  ADD_FAILURE() << "no row for " << tensor_role_name(role);
  return {};
}

// The plan walks the table: the fold table of FORMATS.md §6.3 for every family.
TEST(FoldPlan, FollowsTheFoldTable) {
  using O = FoldOp;
  using R = TensorRole;
  for (std::string fam : {"llama", "qwen2", "qwen3"}) {
    auto p = plan_folds(config_of(tiny_json(fam, true)), RotationOptions{});
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_TRUE(p->untie);
    EXPECT_EQ(p->r1.k, fam == "qwen3" ? 20 : 12) << fam;
    EXPECT_EQ(ops_of(*p, R::kEmbed), (std::vector<O>{O::kR1Right}));
    EXPECT_EQ(ops_of(*p, R::kLmHead), (std::vector<O>{O::kCloneEmbed, O::kGammaCols, O::kR1Right}));
    EXPECT_EQ(ops_of(*p, R::kNormFinal), (std::vector<O>{O::kSetOnes}));
    EXPECT_EQ(ops_of(*p, R::kNormAttn), (std::vector<O>{O::kSetOnes}));
    EXPECT_EQ(ops_of(*p, R::kAttnQ), (std::vector<O>{O::kGammaCols, O::kR1Right}));
    EXPECT_EQ(ops_of(*p, R::kAttnV), (std::vector<O>{O::kGammaCols, O::kR1Right, O::kR2LeftT}));
    EXPECT_EQ(ops_of(*p, R::kAttnO), (std::vector<O>{O::kR1LeftT, O::kR2Right}));
    EXPECT_EQ(ops_of(*p, R::kMlpUp), (std::vector<O>{O::kGammaCols, O::kR1Right}));
    EXPECT_EQ(ops_of(*p, R::kMlpDown), (std::vector<O>{O::kR1LeftT}));
    if (fam == "qwen2") {
      EXPECT_TRUE(ops_of(*p, R::kAttnQBias).empty());
      EXPECT_TRUE(ops_of(*p, R::kAttnKBias).empty());
      EXPECT_EQ(ops_of(*p, R::kAttnVBias), (std::vector<O>{O::kR2LeftT}));
    }
    if (fam == "qwen3") {
      EXPECT_TRUE(ops_of(*p, R::kQNorm).empty());
      EXPECT_TRUE(ops_of(*p, R::kKNorm).empty());
    }
    std::vector<std::string> lines = describe_plan(*p);
    ASSERT_GT(lines.size(), 5u);
    EXPECT_TRUE(contains(lines[2], "R1: hadamard n=")) << lines[2];
  }
  auto biased = plan_folds(config_of(tiny_json("llama", false)), RotationOptions{});
  ASSERT_TRUE(biased.ok());
  EXPECT_FALSE(biased->untie);
  EXPECT_EQ(ops_of(*biased, R::kAttnOBias), (std::vector<O>{O::kR1LeftT}));
  EXPECT_EQ(ops_of(*biased, R::kMlpDownBias), (std::vector<O>{O::kR1LeftT}));
  EXPECT_TRUE(ops_of(*biased, R::kMlpUpBias).empty());
  EXPECT_TRUE(ops_of(*biased, R::kAttnQBias).empty());
  EXPECT_EQ(ops_of(*biased, R::kLmHead), (std::vector<O>{O::kGammaCols, O::kR1Right}));
}

// qwen3_5 by the corridor map: DeltaNet projections read and write the residual like attention's;
// the inner DeltaNet tensors and q/k norms stay; R2 is off (noted, or refused when asked for).
TEST(FoldPlan, Qwen35CorridorMap) {
  using O = FoldOp;
  using R = TensorRole;
  auto p = plan_folds(config_of(tiny_json("qwen3_5", true)), RotationOptions{});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->untie);
  EXPECT_EQ(p->r2.kind, RotationKind::kNone);
  ASSERT_EQ(p->notes.size(), 1u);
  EXPECT_TRUE(contains(p->notes[0], "gate")) << p->notes[0];
  for (R r : {R::kLinQkv, R::kLinZ, R::kLinB, R::kLinA, R::kAttnQ, R::kAttnK, R::kAttnV,
              R::kMlpGate, R::kMlpUp})
    EXPECT_EQ(ops_of(*p, r), (std::vector<O>{O::kGammaCols, O::kR1Right})) << tensor_role_name(r);
  for (R r : {R::kLinOut, R::kAttnO, R::kMlpDown})
    EXPECT_EQ(ops_of(*p, r), (std::vector<O>{O::kR1LeftT})) << tensor_role_name(r);
  for (R r : {R::kLinConv, R::kLinDtBias, R::kLinALog, R::kLinNorm, R::kQNorm, R::kKNorm})
    EXPECT_TRUE(ops_of(*p, r).empty()) << tensor_role_name(r);
  EXPECT_EQ(ops_of(*p, R::kLmHead), (std::vector<O>{O::kCloneEmbed, O::kGammaCols, O::kR1Right}));
  EXPECT_EQ(ops_of(*p, R::kNormFinal), (std::vector<O>{O::kSetOnes}));
  // Each per-layer row appears once although layer 0 and layer 1 hold different rows.
  std::vector<const TensorKind*> rows;
  for (const auto& f : p->layer) rows.push_back(f.kind);
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(std::adjacent_find(rows.begin(), rows.end()), rows.end());

  for (RotationKind k : {RotationKind::kHadamard, RotationKind::kRandom}) {
    auto q = plan_folds(config_of(tiny_json("qwen3_5", true)),
                        RotationOptions{.r2 = k, .r2_given = true});
    ASSERT_FALSE(q.ok());
    EXPECT_TRUE(contains(q.error().message, "--r2")) << q.error().message;
    EXPECT_TRUE(contains(q.error().message, "gate")) << q.error().message;
  }
  EXPECT_TRUE(plan_folds(config_of(tiny_json("qwen3_5", true)),
                         RotationOptions{.r2 = RotationKind::kNone, .r2_given = true})
                  .ok());
  // The MTP companion folds with the same R1: fc's two input halves each γ-folded and turned,
  // its output turned back; its final gain (feeding the trunk's head) set to ones.
  ModelConfig with_mtp = config_of(tiny_json("qwen3_5", true));
  with_mtp.has_mtp = true;
  auto m = plan_folds(with_mtp, RotationOptions{});
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(ops_of(*m, R::kMtpFc), (std::vector<O>{O::kGammaCols, O::kR1Right, O::kR1LeftT}));
  for (const auto& f : m->globals)
    if (f.kind->role == R::kMtpFc) {
      EXPECT_EQ(f.steps[0].norm->role, R::kMtpNormEmb);
      ASSERT_NE(f.steps[0].norm_hi, nullptr);
      EXPECT_EQ(f.steps[0].norm_hi->role, R::kMtpNormHidden);
    }
  for (R r : {R::kMtpNormEmb, R::kMtpNormHidden, R::kMtpNormAttn, R::kMtpNormMlp, R::kMtpNormFinal})
    EXPECT_EQ(ops_of(*m, r), (std::vector<O>{O::kSetOnes})) << tensor_role_name(r);
  EXPECT_EQ(ops_of(*m, R::kMtpQ), (std::vector<O>{O::kGammaCols, O::kR1Right}));
  EXPECT_EQ(ops_of(*m, R::kMtpDown), (std::vector<O>{O::kR1LeftT}));
  EXPECT_TRUE(ops_of(*m, R::kMtpQNorm).empty());

  // An explicit --r2 still works where the family has R2.
  EXPECT_TRUE(
      plan_folds(config_of(tiny_json("llama", true)), RotationOptions{.r2_given = true}).ok());
}

TEST(FoldPlan, SizeErrorsNameTheSizeAndSuggestRandom) {
  nlohmann::json j = tiny_json("llama", true);
  j["hidden_size"] = 156;  // 156 = 4·39: only a Williamson matrix reaches it
  j["num_attention_heads"] = 13;
  j["num_key_value_heads"] = 13;
  j["head_dim"] = 12;
  auto p = plan_folds(config_of(j), RotationOptions{});
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(contains(p.error().message, "hidden_size 156")) << p.error().message;
  EXPECT_TRUE(contains(p.error().message, "--r1 random")) << p.error().message;
  auto q = plan_folds(config_of(j), RotationOptions{.r1 = RotationKind::kRandom});
  ASSERT_FALSE(q.ok());  // head_dim 12 under R2 hadamard
  EXPECT_TRUE(contains(q.error().message, "head_dim 12")) << q.error().message;
  EXPECT_TRUE(contains(q.error().message, "--r2 random")) << q.error().message;
  EXPECT_TRUE(plan_folds(config_of(j),
                         RotationOptions{.r1 = RotationKind::kRandom, .r2 = RotationKind::kRandom})
                  .ok());
}

TEST(FoldApply, MissingOrMisshapenTensorsAreErrors) {
  auto p = plan_folds(config_of(tiny_json("qwen3", false)), RotationOptions{});
  ASSERT_TRUE(p.ok());
  auto f = Folder::create(*p);
  ASSERT_TRUE(f.ok()) << f.error().message;
  TensorMap empty;
  Status st = f->apply_layer(0, empty);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.error().message, "model.layers.0.")) << st.error().message;
  EXPECT_FALSE(f->apply_layer(2, empty).ok());  // 2 layers: 0 and 1
  TensorMap g;
  g["model.embed_tokens.weight"] = FloatTensor{{70, 41}, std::vector<float>(70 * 41)};
  g["model.norm.weight"] = FloatTensor{{40}, std::vector<float>(40, 1.0f)};
  g["lm_head.weight"] = FloatTensor{{70, 40}, std::vector<float>(70 * 40)};
  st = f->apply_globals(g);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.error().message, "[70, 41]")) << st.error().message;
}

// rotation.json alone rebuilds R1 (signs + H_K rows), and rotations.safetensors holds the
// matrices the fold used.
TEST(FoldApply, RotationRecordsRecreateTheMatrices) {
  auto p = plan_folds(config_of(tiny_json("llama", true)), RotationOptions{.seed = 3});
  ASSERT_TRUE(p.ok());
  auto f = Folder::create(*p);
  ASSERT_TRUE(f.ok());
  nlohmann::json j = f->rotation_json();
  const int64_t n = j["r1"]["n"], k = j["r1"]["K"], m = j["r1"]["m"];
  const std::string signs = j["r1"]["signs"];
  ASSERT_EQ(static_cast<int64_t>(signs.size()), n);
  ASSERT_EQ(static_cast<int64_t>(j["r1"]["H_K"].size()), k);
  std::vector<double> rebuilt(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < n; ++c) {
      const int64_t a = i >> m, b = i & ((1 << m) - 1), ca = c >> m, cb = c & ((1 << m) - 1);
      const char hk = j["r1"]["H_K"][a].get<std::string>()[ca];
      const int s = __builtin_popcountll(b & cb) % 2 ? -1 : 1;
      rebuilt[i * n + c] = (signs[i] == '-' ? -1 : 1) * (hk == '-' ? -1 : 1) * s / std::sqrt(n);
    }
  auto r1 = p->make_r1();
  ASSERT_TRUE(r1.ok());
  std::vector<double> q = rotation_matrix(*r1);
  for (int64_t i = 0; i < n * n; ++i) ASSERT_NEAR(rebuilt[i], q[i], 1e-15) << i;
  EXPECT_EQ(j["r2"]["layers"].size(), 2u);
  EXPECT_EQ(j["r2"]["layers"][1]["signs"].get<std::string>().size(), 8u);

  auto bytes = f->rotations_safetensors();
  ASSERT_TRUE(bytes.ok());
  testing::TempDir dir;
  testing::write_file(dir.file("rotations.safetensors"), *bytes);
  auto st = SafetensorsFile::open(dir.file("rotations.safetensors"));
  ASSERT_TRUE(st.ok()) << st.error().message;
  const SafetensorsEntry* e = st->find("r1");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (Shape{n, n}));
  std::vector<double> stored(n * n);
  std::memcpy(stored.data(), st->data(*e).data(), stored.size() * 8);
  EXPECT_EQ(stored, q);
  ASSERT_NE(st->find("r2.layers.1"), nullptr);
  EXPECT_EQ(f->metadata()["r1"]["construction"], "paley1(q=11)");
}

}  // namespace
}  // namespace tq
