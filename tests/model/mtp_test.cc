// qwen3_5's MTP head through our runtimes (docs/QWEN35.md "The MTP companion"), on a tiny
// Hugging Face checkpoint with mtp.* whose MTP final norm equals the trunk's (so the fold is
// exact): the companion's tensors survive `tq convert` (equal as f32, packed at 4 bits); the
// plain and the rotation-folded (f32) conversions give the same draft logits (fold parity);
// those equal a naive double forward of the source's weights, on both runtimes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "../testing/test_files.h"
#include "convert/convert.h"
#include "convert/fold_float.h"
#include "io/checkpoint_dir.h"
#include "io/safetensors.h"
#include "model/forward.h"
#include "model/mtp.h"
#include "quant/rtn_quantizer.h"

namespace tq {
namespace {

// Layer 0 Gated DeltaNet, layer 1 gated attention; widths multiples of 32 (4-bit g32).
nlohmann::json mtp_json() {
  return {{"model_type", "qwen3_5"},
          {"hidden_size", 64},
          {"num_hidden_layers", 2},
          {"intermediate_size", 96},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"rms_norm_eps", 1e-6},
          {"vocab_size", 80},
          {"tie_word_embeddings", true},
          {"full_attention_interval", 2},
          {"linear_num_key_heads", 2},
          {"linear_num_value_heads", 4},
          {"linear_key_head_dim", 16},
          {"linear_value_head_dim", 16},
          {"linear_conv_kernel_dim", 4},
          {"rope_parameters", {{"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}}};
}

ModelConfig mtp_config(bool hf_layout) {
  auto cfg = parse_model_config(mtp_json(), "config.json");
  EXPECT_TRUE(cfg.ok()) << cfg.error().message;
  cfg->hf_layout = hf_layout, cfg->has_mtp = true;
  return *cfg;
}

// The source (Hugging Face layout, f32): zero-centred gains near 0, mtp.norm = the final norm.
std::string write_source(const testing::TempDir& dir) {
  const ModelConfig cfg = mtp_config(true);
  const std::vector<TensorSpec> specs = expected_tensors(cfg);
  std::vector<TensorDecl> decls;
  for (const auto& s : specs) decls.push_back({s.name, DType::kF32, s.shape});
  const std::string path = dir.file("src");
  std::filesystem::create_directories(path);
  auto w = ShardedWriter::create(path, decls, {});
  EXPECT_TRUE(w.ok()) << w.error().message;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.25f);
  std::vector<float> final_norm;
  for (const auto& s : specs) {
    std::vector<float> v(static_cast<size_t>(shape_numel(s.shape)));
    for (auto& x : v) x = nd(rng);
    if (s.kind->role == TensorRole::kNormFinal) final_norm = v;
    if (s.kind->role == TensorRole::kMtpNormFinal) v = final_norm;  // listed after the trunk's
    EXPECT_TRUE((*w)->write(s.name, testing::as_bytes(v)).ok());
  }
  EXPECT_TRUE((*w)->finish().ok());
  testing::write_file(path + "/config.json", mtp_json().dump());
  return path;
}

Status convert_to(const std::string& src, const std::string& dst, std::optional<int> bits) {
  ConvertOptions o;
  o.source = src, o.dest = dst, o.record_timings = false;
  if (bits) {
    o.plan.bits = bits, o.plan.group_size = 32;
  } else {
    o.plan.keep_float = {"*"}, o.dtype = DType::kF32;
  }
  TQ_TRY(ConvertJob job, prepare_convert(o, {}));
  RtnQuantizer rtn;
  TQ_TRY(ConvertSummary s, run_convert(job, rtn, o));
  (void)s;
  return ok_status();
}

struct Draft {
  std::vector<float> hidden;  // [T, d] the trunk's, before the final norm
  std::vector<float> logits;  // [T - 1, vocab]: row t drafts token t + 2
};

// The trunk prefills `prefill` tokens, then decodes the rest one at a time; the MTP head runs
// in step (a prefill, then one row per trunk step), as a speculative decoder would call it.
Result<Draft> draft(const std::string& path, RuntimeOptions opts, const std::vector<int32_t>& ids,
                    int64_t prefill) {
  opts.mtp = true;
  TQ_TRY(ModelSource src, open_model(path));
  TQ_TRY(auto t, Transformer::load(src, opts));
  const int64_t T = static_cast<int64_t>(ids.size()), d = t->config().hidden_size;
  const int64_t vocab = t->config().vocab_size;
  KvCache cache = t->new_cache(T), mcache = t->new_mtp_cache(T);
  Draft out;
  out.hidden.resize(static_cast<size_t>(T * d));
  out.logits.resize(static_cast<size_t>((T - 1) * vocab));
  std::vector<float> logits(static_cast<size_t>(T * vocab));
  const std::span<const int32_t> all(ids);
  SeqStep pre{all.first(prefill),
              &cache,
              logits,
              true,
              false,
              std::span<float>(out.hidden).first(prefill * d)};
  TQ_CHECK_OK(t->forward_batch({&pre, 1}));
  TQ_CHECK_OK(t->mtp_forward(std::span<const float>(out.hidden).first((prefill - 1) * d),
                             all.subspan(1, prefill - 1), mcache, out.logits));
  for (int64_t p = prefill; p < T; ++p) {
    SeqStep one{all.subspan(p, 1),
                &cache,
                logits,
                false,
                false,
                std::span<float>(out.hidden).subspan(p * d, d)};
    TQ_CHECK_OK(t->forward_batch({&one, 1}));
    TQ_CHECK_OK(t->mtp_forward(std::span<const float>(out.hidden).subspan((p - 1) * d, d),
                               all.subspan(p, 1), mcache,
                               std::span<float>(out.logits).subspan((p - 1) * vocab, vocab)));
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

// The MTP forward written out in doubles from the source's tensors (Hugging Face names, gains
// stored zero-centred, tied head): rows 0 .. n-1 at positions 0 .. n-1, one causal pass.
std::vector<double> naive_draft(const std::string& path, const std::vector<float>& hidden,
                                std::span<const int32_t> next) {
  const ModelConfig c = mtp_config(true);
  auto src = DirTensorSource::open(path);
  EXPECT_TRUE(src.ok());
  auto w = [&](const std::string& name, bool gain = false) {
    auto t = (*src)->load_f32(name);
    EXPECT_TRUE(t.ok()) << name;
    std::vector<double> v(t->data.begin(), t->data.end());
    if (gain)
      for (double& x : v) x += 1.0;
    return v;
  };
  const int64_t n = static_cast<int64_t>(next.size()), d = c.hidden_size, hd = c.head_dim;
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, I = c.intermediate_size;
  const int64_t V = c.vocab_size, rd = c.rotary_dims();
  auto rms = [&](const double* x, const std::vector<double>& g, int64_t dim, double* out) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[i] * x[i];
    const double r = 1.0 / std::sqrt(ss / dim + c.rms_norm_eps);
    for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * r * g[i];
  };
  // y [rows] = W [rows, cols] · x [cols]
  auto mv = [](const std::vector<double>& W, const double* x, int64_t rows, int64_t cols,
               double* y) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t k = 0; k < cols; ++k) s += W[r * cols + k] * x[k];
      y[r] = s;
    }
  };
  auto rope = [&](double* v, int64_t pos) {  // rotate-half over the first rd dims
    for (int64_t i = 0; i < rd / 2; ++i) {
      const double a = pos * std::pow(c.rope_theta, -2.0 * i / rd);
      const double x1 = v[i], x2 = v[i + rd / 2];
      v[i] = x1 * std::cos(a) - x2 * std::sin(a);
      v[i + rd / 2] = x2 * std::cos(a) + x1 * std::sin(a);
    }
  };
  const std::string p = "mtp.layers.0.";
  const auto embed = w("model.language_model.embed_tokens.weight"), fc = w("mtp.fc.weight");
  const auto g_emb = w("mtp.pre_fc_norm_embedding.weight", true);
  const auto g_hid = w("mtp.pre_fc_norm_hidden.weight", true);
  const auto g_att = w(p + "input_layernorm.weight", true);
  const auto g_mlp = w(p + "post_attention_layernorm.weight", true);
  const auto g_q = w(p + "self_attn.q_norm.weight", true),
             g_k = w(p + "self_attn.k_norm.weight", true);
  const auto g_fin = w("mtp.norm.weight", true);
  const auto wq = w(p + "self_attn.q_proj.weight"), wk = w(p + "self_attn.k_proj.weight");
  const auto wv = w(p + "self_attn.v_proj.weight"), wo = w(p + "self_attn.o_proj.weight");
  const auto wg = w(p + "mlp.gate_proj.weight"), wu = w(p + "mlp.up_proj.weight");
  const auto wd = w(p + "mlp.down_proj.weight");
  std::vector<double> x(n * d), q(n * H * hd), gate(n * H * hd), k(n * KV * hd), v(n * KV * hd);
  std::vector<double> in(2 * d), a(d), qg(2 * H * hd);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> e(embed.begin() + next[t] * d, embed.begin() + (next[t] + 1) * d);
    std::vector<double> h(hidden.begin() + t * d, hidden.begin() + (t + 1) * d);
    rms(e.data(), g_emb, d, in.data());
    rms(h.data(), g_hid, d, in.data() + d);
    mv(fc, in.data(), d, 2 * d, &x[t * d]);
    rms(&x[t * d], g_att, d, a.data());
    mv(wq, a.data(), 2 * H * hd, d, qg.data());
    for (int64_t hh = 0; hh < H; ++hh) {  // per head [query | gate]
      rms(&qg[2 * hh * hd], g_q, hd, &q[(t * H + hh) * hd]);
      std::copy_n(&qg[(2 * hh + 1) * hd], hd, &gate[(t * H + hh) * hd]);
      rope(&q[(t * H + hh) * hd], t);
    }
    mv(wk, a.data(), KV * hd, d, &k[t * KV * hd]);
    mv(wv, a.data(), KV * hd, d, &v[t * KV * hd]);
    for (int64_t g = 0; g < KV; ++g) {
      rms(&k[(t * KV + g) * hd], g_k, hd, &k[(t * KV + g) * hd]);
      rope(&k[(t * KV + g) * hd], t);
    }
  }
  std::vector<double> logits(n * V), att(H * hd), o(d), m(d), gu(I), up(I), dn(d);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t hh = 0; hh < H; ++hh) {
      const int64_t g = hh / (H / KV);
      std::vector<double> s(t + 1);
      double mx = -1e300, den = 0;
      for (int64_t u = 0; u <= t; ++u) {
        double dot = 0;
        for (int64_t i = 0; i < hd; ++i) dot += q[(t * H + hh) * hd + i] * k[(u * KV + g) * hd + i];
        s[u] = dot / std::sqrt(double(hd)), mx = std::max(mx, s[u]);
      }
      for (double& e : s) e = std::exp(e - mx), den += e;
      for (int64_t i = 0; i < hd; ++i) {
        double acc = 0;
        for (int64_t u = 0; u <= t; ++u) acc += s[u] * v[(u * KV + g) * hd + i];
        att[hh * hd + i] = acc / den / (1.0 + std::exp(-gate[(t * H + hh) * hd + i]));
      }
    }
    double* xt = &x[t * d];
    mv(wo, att.data(), d, H * hd, o.data());
    for (int64_t i = 0; i < d; ++i) xt[i] += o[i];
    rms(xt, g_mlp, d, m.data());
    mv(wg, m.data(), I, d, gu.data());
    mv(wu, m.data(), I, d, up.data());
    for (int64_t i = 0; i < I; ++i) gu[i] = gu[i] / (1.0 + std::exp(-gu[i])) * up[i];
    mv(wd, gu.data(), d, I, dn.data());
    for (int64_t i = 0; i < d; ++i) xt[i] += dn[i];
    rms(xt, g_fin, d, m.data());
    mv(embed, m.data(), V, d, &logits[t * V]);
  }
  return logits;
}

TEST(Mtp, CompanionSurvivesConvertAndFoldedDraftsEqualPlainOnes) {
  testing::TempDir dir;
  const std::string src = write_source(dir), plain = dir.file("plain"), q4 = dir.file("q4");
  const std::string folded = dir.file("folded");
  ASSERT_TRUE(convert_to(src, plain, std::nullopt).ok());
  ASSERT_TRUE(convert_to(src, q4, 4).ok());
  RotationOptions ro{.r1 = RotationKind::kHadamard, .r2 = RotationKind::kNone, .seed = 17};
  Status st = write_folded_float(src, ro, folded);
  ASSERT_TRUE(st.ok()) << st.error().message;

  // The companion's tensors survive: every MTP row, f32 ones equal to the source's as applied,
  // 4-bit ones packed where the table says quantizable; the model's own files hold none.
  auto s0 = DirTensorSource::open(src);
  ASSERT_TRUE(s0.ok());
  const ModelConfig mlx = mtp_config(false);
  for (const std::string& out : {plain, q4}) {
    auto comp = DirTensorSource::open_companion(out, "mtp");
    ASSERT_TRUE(comp.ok()) << comp.error().message;
    auto model = DirTensorSource::open(out);
    ASSERT_TRUE(model.ok());
    for (const TensorInfo& t : (*model)->tensors())
      EXPECT_FALSE(t.name.starts_with("mtp.")) << t.name;
    size_t rows = 0;
    for (const TensorSpec& s : expected_tensors(mlx)) {
      if (!s.kind->companion()) continue;
      ++rows;
      const TensorInfo* ti = (*comp)->find(s.name);
      ASSERT_NE(ti, nullptr) << out << ": " << s.name;
      EXPECT_EQ(ti->shape, s.shape) << s.name;
      EXPECT_EQ(ti->mlx_quant.has_value(), out == q4 && s.kind->quantizable) << s.name;
      if (out != plain) continue;
      auto a = (*s0)->load_f32(s.name), b = (*comp)->load_f32(s.name);
      ASSERT_TRUE(a.ok() && b.ok()) << s.name;
      if (s.shape.size() == 1)  // the source's norms are stored zero-centred
        for (float& x : a->data) x += 1.0f;
      EXPECT_EQ(a->data, b->data) << s.name;
    }
    EXPECT_EQ(rows, (*comp)->tensors().size());
    EXPECT_EQ(rows, 15u);
  }

  std::vector<int32_t> ids;
  std::mt19937 rng(5);
  for (int i = 0; i < 40; ++i) ids.push_back(static_cast<int32_t>(rng() % 80));
  const RuntimeOptions ref{.reference = true};
  RuntimeOptions fast{.threads = 2, .activations = ActPath::kF32, .kv_cache = KvType::kF32};
  auto d_src = draft(src, ref, ids, 24), d_plain = draft(plain, ref, ids, 24);
  auto d_fold = draft(folded, ref, ids, 24), f_plain = draft(plain, fast, ids, 24);
  auto f_fold = draft(folded, fast, ids, 24);
  for (auto* r : {&d_src, &d_plain, &d_fold, &f_plain, &f_fold})
    ASSERT_TRUE(r->ok()) << r->error().message;

  // The runtime against the naive forward on the source's weights and the trunk's hidden.
  const std::vector<double> want = naive_draft(src, d_src->hidden, std::span(ids).subspan(1));
  double naive = 0, scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    naive = std::max(naive, std::abs(want[i] - d_src->logits[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  const double plain_src = max_abs_diff(d_src->logits, d_plain->logits);
  const double fold_ref = max_abs_diff(d_plain->logits, d_fold->logits);
  const double fold_fast = max_abs_diff(f_plain->logits, f_fold->logits);
  const double fast_ref = max_abs_diff(d_plain->logits, f_plain->logits);
  std::printf(
      "MTP draft logits (|max| %.2f), max abs diff: naive %.2e, plain vs source %.2e, folded vs "
      "plain %.2e (reference) %.2e (fast), fast vs reference %.2e\n",
      scale, naive, plain_src, fold_ref, fold_fast, fast_ref);
  EXPECT_LE(naive, 1e-4 * scale);
  EXPECT_LE(plain_src, 1e-5 * scale);
  EXPECT_LE(fold_ref, 1e-4);
  EXPECT_LE(fold_fast, 1e-4);
  EXPECT_LE(fast_ref, 1e-4 * scale);
  // The trunk's hidden states really moved under the fold (R1), and the drafts still agree.
  EXPECT_GT(max_abs_diff(d_plain->hidden, d_fold->hidden), 1e-2);

  // The 4-bit companion runs packed on the fast runtime as the reference dequantizes it.
  auto q_ref = draft(q4, ref, ids, 24), q_fast = draft(q4, fast, ids, 24);
  ASSERT_TRUE(q_ref.ok() && q_fast.ok());
  const double q4_fast_ref = max_abs_diff(q_ref->logits, q_fast->logits);
  std::printf("4-bit: fast vs reference %.2e, vs plain %.2e\n", q4_fast_ref,
              max_abs_diff(q_ref->logits, d_plain->logits));
  EXPECT_LE(q4_fast_ref, 1e-3 * scale);
}

TEST(Mtp, ErrorsAreValues) {
  testing::TempDir dir;
  const std::string src = write_source(dir);
  auto s = open_model(src);
  ASSERT_TRUE(s.ok());
  auto t = Transformer::load(*s, RuntimeOptions{.reference = true});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE((*t)->has_mtp());
  KvCache c = (*t)->new_mtp_cache(4);
  std::vector<float> h(64), logits(80);
  const int32_t tok = 3;
  Status st = (*t)->mtp_forward(h, {&tok, 1}, c, logits);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("no MTP head loaded"), std::string::npos);

  auto m = Transformer::load(*s, RuntimeOptions{.reference = true, .mtp = true});
  ASSERT_TRUE(m.ok()) << m.error().message;
  KvCache mc = (*m)->new_mtp_cache(1);
  const int32_t bad = 80;
  EXPECT_FALSE((*m)->mtp_forward(h, {&bad, 1}, mc, logits).ok());  // outside the vocabulary
  KvCache trunk = (*m)->new_cache(4);
  EXPECT_FALSE((*m)->mtp_forward(h, {&tok, 1}, trunk, logits).ok());  // the trunk's cache
  EXPECT_TRUE((*m)->mtp_forward(h, {&tok, 1}, mc, logits).ok());
  EXPECT_FALSE((*m)->mtp_forward(h, {&tok, 1}, mc, logits).ok());  // the cache is full

  // A model without a companion refuses the flag in one line.
  const std::string plain = dir.file("plain");
  ASSERT_TRUE(convert_to(src, plain, std::nullopt).ok());
  std::filesystem::remove(plain + "/mtp.safetensors");
  auto p = open_model(plain);
  ASSERT_TRUE(p.ok());
  auto none = Transformer::load(*p, RuntimeOptions{.mtp = true});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("no MTP head"), std::string::npos) << none.error().message;
}

}  // namespace
}  // namespace tq
