// The layer-streamed GPTQ driver on a tiny random llama: its float path equals the runtime's
// forward, the quantized path feeds each layer the quantized layers' outputs, spilled
// activations and resumed checkpoints give the same bytes.
#include "quant/gptq_driver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "../testing/test_files.h"
#include "formats/mlx_quant.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "model/tensor_table.h"
#include "quant/asym_target.h"

namespace tq {
namespace {

using Tensors = std::map<std::string, FloatTensor>;

ModelConfig tiny_config(Family f = Family::kLlama) {
  ModelConfig c;
  c.family = f;
  c.model_type = f == Family::kQwen3 ? "qwen3" : "llama";
  c.hidden_size = 64;
  c.num_hidden_layers = 3;
  c.intermediate_size = 128;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 96;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  return c;
}

Tensors random_model(const ModelConfig& cfg, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensors t;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    FloatTensor f{s.shape, std::vector<float>(static_cast<size_t>(shape_numel(s.shape)))};
    const bool norm = s.shape.size() == 1;
    const float sd = norm ? 0.1f : (s.kind->role == TensorRole::kEmbed ? 1.0f : 0.12f);
    for (auto& v : f.data) v = (norm ? 1.0f : 0.0f) + sd * nd(rng);
    t[s.name] = std::move(f);
  }
  return t;
}

class MapSource : public TensorSource {
 public:
  explicit MapSource(const Tensors& t) : t_(t) {
    for (const auto& [name, f] : t_) {
      TensorInfo info;
      info.name = name;
      info.shape = f.shape;
      info.storage = "F32";
      infos_.push_back(info);
    }
  }
  const std::string& path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Result<FloatTensor> load_f32(const std::string& name) const override {
    auto it = t_.find(name);
    if (it == t_.end()) return err("map: no tensor {}", name);
    return it->second;
  }

 private:
  std::string path_ = "map";
  Tensors t_;
  std::vector<TensorInfo> infos_;
};

Tensors layer_tensors(const Tensors& all, int64_t layer) {
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  Tensors out;
  for (const auto& [name, f] : all)
    if (name.rfind(prefix, 0) == 0) out[name] = f;
  return out;
}

CalibSet calib(const ModelConfig& cfg, int64_t rows, int64_t seq, uint32_t seed) {
  CalibSet c;
  c.seq_len = seq;
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < rows * seq; ++i)
    c.tokens.push_back(static_cast<int32_t>(rng() % cfg.vocab_size));
  return c;
}

std::map<std::string, QuantSpec> all_linear_specs(const ModelConfig& cfg, int64_t layer,
                                                  QuantSpec spec) {
  std::map<std::string, QuantSpec> out;
  for (const TensorSpec& s : expected_tensors(cfg))
    if (s.layer == layer && s.kind->quantizable && s.shape.size() == 2)
      out[s.name.substr(0, s.name.size() - 7)] = spec;  // module path
  return out;
}

// Logits of the driver's final activations (final norm, tied head) for row r.
std::vector<float> driver_logits(const GptqDriver& d, const Tensors& t, const ModelConfig& cfg,
                                 int64_t r, int64_t seq) {
  std::vector<float> x(static_cast<size_t>(seq * cfg.hidden_size));
  EXPECT_TRUE(d.activations().read_row(r, x).ok());
  rms_norm(x.data(), t.at("model.norm.weight").data.data(), seq, cfg.hidden_size,
           static_cast<float>(cfg.rms_norm_eps), x.data());
  std::vector<float> logits(static_cast<size_t>(seq * cfg.vocab_size));
  matmul_nt(x.data(), seq, cfg.hidden_size, t.at("model.embed_tokens.weight").data.data(),
            cfg.vocab_size, nullptr, logits.data());
  return logits;
}

std::vector<float> runtime_logits(const Tensors& t, const ModelConfig& cfg,
                                  std::span<const int32_t> tokens) {
  ModelSource src;
  src.path = "map";
  src.config = cfg;
  src.tensors = std::make_unique<MapSource>(t);
  auto tr = Transformer::load(src, RuntimeOptions{.reference = true});
  EXPECT_TRUE(tr.ok()) << tr.error().message;
  KvCache kv = (*tr)->new_cache(static_cast<int64_t>(tokens.size()));
  std::vector<float> logits(tokens.size() * static_cast<size_t>(cfg.vocab_size));
  Status st = (*tr)->forward(tokens, kv, logits, true);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return logits;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Runs every layer through the driver; returns the modules of all layers.
std::vector<GptqModule> run_all(GptqDriver& d, const Tensors& t, const ModelConfig& cfg,
                                const QuantSpec* spec, int64_t first = 0, int64_t last = -1) {
  if (last < 0) last = cfg.num_hidden_layers;
  std::vector<GptqModule> out;
  for (int64_t l = first; l < last; ++l) {
    auto specs = spec ? all_linear_specs(cfg, l, *spec) : std::map<std::string, QuantSpec>{};
    auto mods = d.quantize_layer(l, layer_tensors(t, l), specs, DType::kF32);
    EXPECT_TRUE(mods.ok()) << mods.error().message;
    if (!mods.ok()) break;
    for (auto& m : *mods) out.push_back(std::move(m));
  }
  return out;
}

TEST(GptqDriver, FloatPathEqualsRuntimeForward) {
  for (Family f : {Family::kLlama, Family::kQwen3}) {
    ModelConfig cfg = tiny_config(f);
    Tensors t = random_model(cfg, 1);
    CalibSet cs = calib(cfg, 3, 24, 2);
    auto d = GptqDriver::create(cfg, cs, {});
    ASSERT_TRUE(d.ok()) << d.error().message;
    ASSERT_TRUE((*d)->set_embedding(t.at("model.embed_tokens.weight")).ok());
    auto mods = run_all(**d, t, cfg, nullptr);
    EXPECT_TRUE(mods.empty());
    for (int64_t r = 0; r < cs.rows(); ++r) {
      auto want = runtime_logits(t, cfg, cs.row(r));
      auto got = driver_logits(**d, t, cfg, r, cs.seq_len);
      EXPECT_LT(max_abs_diff(got, want), 1e-4f) << "row " << r;
    }
  }
}

// Replaces each quantized module's weight by its decoded matrix.
Tensors with_decoded(Tensors t, const std::vector<GptqModule>& mods) {
  for (const GptqModule& m : mods) {
    FloatTensor& f = t.at(m.name + ".weight");
    std::vector<float> q(f.data.size());
    EXPECT_TRUE(dequantize_mlx(m.spec, m.shape[0], m.shape[1], m.weight, m.scale_dtype, m.scales,
                               m.biases, q)
                    .ok());
    f.data = std::move(q);
  }
  return t;
}

TEST(GptqDriver, QuantizedPathFeedsTheNextLayer) {
  ModelConfig cfg = tiny_config();
  Tensors t = random_model(cfg, 3);
  CalibSet cs = calib(cfg, 4, 32, 4);
  std::vector<std::string> lines;
  GptqDriverOptions opt;
  opt.progress = [&](const GptqProgress& p) {
    lines.push_back(p.module);
    EXPECT_LE(p.result->proxy_loss, p.result->rtn_loss);
  };
  auto d = GptqDriver::create(cfg, cs, opt);
  ASSERT_TRUE(d.ok()) << d.error().message;
  ASSERT_TRUE((*d)->set_embedding(t.at("model.embed_tokens.weight")).ok());
  const QuantSpec spec{QuantMode::kAffine, 3, 32};
  auto mods = run_all(**d, t, cfg, &spec);
  ASSERT_EQ(mods.size(), static_cast<size_t>(7 * cfg.num_hidden_layers));
  // true-sequential order within a layer
  EXPECT_EQ(lines[0], "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(lines[3], "model.layers.0.self_attn.o_proj");
  EXPECT_EQ(lines[6], "model.layers.0.mlp.down_proj");
  int gptq = 0;
  for (const auto& m : mods) {
    EXPECT_LE(m.info["proxy_loss"].get<double>(), m.info["rtn_loss"].get<double>()) << m.name;
    gptq += m.info["method"] == "gptq";
  }
  EXPECT_GT(gptq, 14);
  EXPECT_EQ((*d)->summary()["modules"], 21);
  // The final activations are the quantized model's hidden states.
  Tensors q = with_decoded(t, mods);
  for (int64_t r = 0; r < cs.rows(); ++r) {
    auto want = runtime_logits(q, cfg, cs.row(r));
    auto got = driver_logits(**d, t, cfg, r, cs.seq_len);
    EXPECT_LT(max_abs_diff(got, want), 1e-4f) << "row " << r;
  }
  // Out-of-order and repeated layers are errors.
  EXPECT_FALSE((*d)->quantize_layer(1, layer_tensors(t, 1), {}, DType::kF32).ok());
}

void expect_same_modules(const std::vector<GptqModule>& a, const std::vector<GptqModule>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].weight, b[i].weight) << a[i].name;
    EXPECT_EQ(a[i].scales, b[i].scales) << a[i].name;
    EXPECT_EQ(a[i].biases, b[i].biases) << a[i].name;
  }
}

TEST(GptqDriver, SpillAndResumeGiveTheSameBytes) {
  ModelConfig cfg = tiny_config();
  Tensors t = random_model(cfg, 5);
  CalibSet cs = calib(cfg, 3, 32, 6);
  const QuantSpec spec{QuantMode::kAffine, 4, 32};
  GptqDriverOptions opt;
  opt.fingerprint = "fp-1";
  auto ref = GptqDriver::create(cfg, cs, opt);
  ASSERT_TRUE(ref.ok());
  ASSERT_TRUE((*ref)->set_embedding(t.at("model.embed_tokens.weight")).ok());
  auto want = run_all(**ref, t, cfg, &spec);

  testing::TempDir dir;
  GptqDriverOptions spill = opt;
  spill.max_calib_memory = 0;
  spill.scratch_dir = dir.path();
  spill.checkpoint_dir = dir.file("ckpt");
  {  // "killed" after two layers
    auto d = GptqDriver::create(cfg, cs, spill);
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_TRUE((*d)->activations().spilled());
    ASSERT_TRUE((*d)->set_embedding(t.at("model.embed_tokens.weight")).ok());
    run_all(**d, t, cfg, &spec, 0, 2);
  }
  auto d = GptqDriver::create(cfg, cs, spill);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ((*d)->next_layer(), 2);
  EXPECT_EQ((*d)->resumed_layers(), 2);
  ASSERT_TRUE((*d)->set_embedding(t.at("model.embed_tokens.weight")).ok());  // ignored
  auto got = run_all(**d, t, cfg, &spec);
  expect_same_modules(got, want);
  EXPECT_EQ((*d)->summary()["modules"], 21);

  GptqDriverOptions other = spill;
  other.fingerprint = "fp-2";
  EXPECT_FALSE(GptqDriver::create(cfg, cs, other).ok());
}

TEST(GptqDriver, ModulesFileRoundTripsAndRejectsDamage) {
  testing::TempDir dir;
  GptqModule m;
  m.name = "model.layers.0.mlp.up_proj";
  m.shape = {8, 32};
  m.spec = {QuantMode::kAffine, 4, 32};
  m.scale_dtype = DType::kBF16;
  m.weight.assign(128, 7);
  m.scales.assign(16, 1);
  m.biases.assign(16, 2);
  m.info = {{"proxy_loss", 1.5}};
  const std::string p = dir.file("l.tqc");
  ASSERT_TRUE(write_modules_file(p, {m}).ok());
  auto back = read_modules_file(p);
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same_modules(*back, {m});
  EXPECT_EQ((*back)[0].info["proxy_loss"], 1.5);
  EXPECT_EQ((*back)[0].spec, m.spec);
  std::string bytes = testing::read_file(p);
  testing::write_file(p, bytes.substr(0, bytes.size() - 10));
  EXPECT_FALSE(read_modules_file(p).ok());
  testing::write_file(p, "\xff\xff\xff\xff\xff\xff\xff\x7f{}");
  EXPECT_FALSE(read_modules_file(p).ok());
  testing::write_file(p, std::string("\x02\0\0\0\0\0\0\0{]", 10));
  EXPECT_FALSE(read_modules_file(p).ok());
}

TEST(AsymTarget, SolvesTheRidgedNormalEquations) {
  const int64_t n = 200, cols = 12, rows = 5;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n * cols)), f(q.size()),
      w(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = nd(rng);
    f[i] = q[i] + 0.3f * nd(rng);
  }
  for (float& v : w) v = nd(rng);
  HessianAccumulator hacc(cols, HessianPrecision::kF64);
  ASSERT_TRUE(hacc.add(q, n).ok());
  CrossAccumulator cross(cols);
  ASSERT_TRUE(cross.add(f, q, n).ok());
  const std::vector<double> h = hacc.hessian(), delta = cross.delta();
  const double damp = 0.01;
  auto ws = asym_target(w, rows, cols, delta, h, damp);
  ASSERT_TRUE(ws.ok()) << ws.error().message;
  double mean_diag = 0;
  for (int64_t j = 0; j < cols; ++j) mean_diag += h[j * cols + j];
  const double lambda = damp * mean_diag / cols;
  // W* (H + λI) = W (H + Δ) + λ W, row by row.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      double lhs = lambda * (*ws)[r * cols + k], rhs = lambda * w[r * cols + k];
      for (int64_t j = 0; j < cols; ++j) {
        lhs += (*ws)[r * cols + j] * h[j * cols + k];
        rhs += w[r * cols + j] * (h[j * cols + k] + delta[j * cols + k]);
      }
      EXPECT_NEAR(lhs, rhs, 1e-3 * (1 + std::fabs(rhs))) << r << "," << k;
    }
  // Identical streams: nothing to correct.
  CrossAccumulator same(cols);
  ASSERT_TRUE(same.add(q, q, n).ok());
  auto w0 = asym_target(w, rows, cols, same.delta(), h, damp);
  ASSERT_TRUE(w0.ok());
  EXPECT_EQ(*w0, w);
  EXPECT_FALSE(cross.add(f, std::span<const float>(q).first(10), n).ok());
  EXPECT_FALSE(asym_target(w, rows + 1, cols, delta, h, damp).ok());
}

// Mean squared difference between the driver's final hidden states and the float model's.
double hidden_error(const GptqDriver& d, const GptqDriver& float_run, const ModelConfig& cfg,
                    int64_t rows, int64_t seq) {
  std::vector<float> a(static_cast<size_t>(seq * cfg.hidden_size)), b(a.size());
  double e = 0;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(d.activations().read_row(r, a).ok());
    EXPECT_TRUE(float_run.activations().read_row(r, b).ok());
    for (size_t i = 0; i < a.size(); ++i) e += (a[i] - b[i]) * (a[i] - b[i]);
  }
  return e;
}

TEST(GptqDriver, AsymFollowsTheFloatModelAndResumes) {
  ModelConfig cfg = tiny_config();
  Tensors t = random_model(cfg, 7);
  CalibSet cs = calib(cfg, 4, 32, 8);
  const QuantSpec spec{QuantMode::kAffine, 2, 32};
  auto run = [&](bool asym, const QuantSpec* s) {
    GptqDriverOptions opt;
    opt.gptq.asym = asym;
    auto d = GptqDriver::create(cfg, cs, opt);
    EXPECT_TRUE(d.ok()) << d.error().message;
    EXPECT_TRUE((*d)->set_embedding(t.at("model.embed_tokens.weight")).ok());
    auto mods = run_all(**d, t, cfg, s);
    return std::make_pair(std::move(*d), std::move(mods));
  };
  auto [ref, none] = run(false, nullptr);
  auto [plain, plain_mods] = run(false, &spec);
  auto [asym, asym_mods] = run(true, &spec);
  ASSERT_EQ(asym_mods.size(), plain_mods.size());
  const double e_plain = hidden_error(*plain, *ref, cfg, cs.rows(), cs.seq_len);
  const double e_asym = hidden_error(*asym, *ref, cfg, cs.rows(), cs.seq_len);
  EXPECT_LT(e_asym, e_plain);
  // Layer 0's q/k/v see the same input in both streams: the same codes.
  EXPECT_EQ(asym_mods[0].weight, plain_mods[0].weight);
  bool differ = false;
  for (size_t i = 0; i < asym_mods.size(); ++i)
    differ |= asym_mods[i].weight != plain_mods[i].weight;
  EXPECT_TRUE(differ);

  // The float stream is checkpointed too: a resumed run gives the same bytes.
  testing::TempDir dir;
  GptqDriverOptions opt;
  opt.gptq.asym = true;
  opt.fingerprint = "asym";
  opt.checkpoint_dir = dir.file("ckpt");
  {
    auto d = GptqDriver::create(cfg, cs, opt);
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE((*d)->set_embedding(t.at("model.embed_tokens.weight")).ok());
    run_all(**d, t, cfg, &spec, 0, 2);
  }
  auto d = GptqDriver::create(cfg, cs, opt);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ((*d)->next_layer(), 2);
  expect_same_modules(run_all(**d, t, cfg, &spec), asym_mods);
  ASSERT_TRUE(std::filesystem::remove(dir.file("ckpt") + "/facts_3.bin"));
  auto broken = GptqDriver::create(cfg, cs, opt);
  EXPECT_FALSE(broken.ok());
}

}  // namespace
}  // namespace tq
