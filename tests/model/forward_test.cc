#include "model/forward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

#include <nlohmann/json.hpp>

#include "../testing/test_files.h"
#include "../testing/tiny_models.h"
#include "formats/mlx_encode.h"
#include "io/safetensors.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/kv_blocks.h"
#include "model/model_source.h"
#include "model/rope.h"
#include "model/tensor_table.h"

namespace tq {
namespace {

using testing::randn;
using testing::tiny_json;
using testing::write_tiny_model;
using testing::write_tiny_q4_model;

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

double max_abs(std::span<const float> a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::abs(double(x)));
  return m;
}

ModelConfig rope_config(double theta, int64_t head_dim) {
  ModelConfig c;
  c.rope_theta = theta;
  c.head_dim = head_dim;
  return c;
}

TEST(Rope, DefaultAndLinearFrequencies) {
  ModelConfig c = rope_config(10000.0, 64);
  auto inv = rope_inv_freq(c);
  ASSERT_TRUE(inv.ok()) << inv.error().message;
  ASSERT_EQ(inv->size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_DOUBLE_EQ((*inv)[i], std::pow(10000.0, -2.0 * i / 64));
  c.rope_scaling = RopeScaling{.type = "linear", .factor = 4.0};
  auto lin = rope_inv_freq(c);
  ASSERT_TRUE(lin.ok());
  for (int i = 0; i < 32; ++i) EXPECT_NEAR((*lin)[i], (*inv)[i] / 4.0, 1e-15);
}

// HF's _compute_llama3_parameters, written on inverse frequencies (FORMATS.md §7.2 states the
// same rule on periods; this is the independent formulation).
TEST(Rope, Llama3MatchesHfInverseFrequencyRule) {
  ModelConfig c = rope_config(500000.0, 64);
  RopeScaling s{.type = "llama3",
                .factor = 32.0,
                .low_freq_factor = 1.0,
                .high_freq_factor = 4.0,
                .original_max_position_embeddings = 8192};
  c.rope_scaling = s;
  auto inv = rope_inv_freq(c);
  ASSERT_TRUE(inv.ok()) << inv.error().message;
  int low = 0, mid = 0, high = 0;
  for (int i = 0; i < 32; ++i) {
    double f = std::pow(500000.0, -2.0 * i / 64), wl = 2 * std::numbers::pi / f;
    double lo_wl = 8192 / 1.0, hi_wl = 8192 / 4.0, want;
    if (wl < hi_wl) {
      want = f, ++high;
    } else if (wl > lo_wl) {
      want = f / 32.0, ++low;
    } else {
      double sm = (8192 / wl - 1.0) / (4.0 - 1.0);
      want = (1 - sm) * f / 32.0 + sm * f, ++mid;
    }
    EXPECT_NEAR((*inv)[i], want, 1e-12 * want) << i;
  }
  EXPECT_GT(low, 0);  // the test config exercises all three bands
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
}

TEST(Rope, UnsupportedScalingIsAnError) {
  ModelConfig c = rope_config(10000.0, 64);
  c.rope_scaling = RopeScaling{.type = "yarn", .factor = 4.0};
  auto inv = rope_inv_freq(c);
  ASSERT_FALSE(inv.ok());
  EXPECT_TRUE(testing::contains(inv.error().message, "yarn")) << inv.error().message;
}

// HF: out = x * cos(cat(θ, θ)) + rotate_half(x) * sin(cat(θ, θ)), rotate_half(x) = cat(-x2, x1).
TEST(Rope, RotateHalfMatchesHfFormula) {
  const int64_t hd = 16, half = 8, pos = 37;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = std::pow(10000.0, -2.0 * i / hd);
  std::vector<float> cs(half), sn(half);
  rope_angles(inv.data(), half, pos, cs.data(), sn.data());
  std::vector<float> x = randn(hd, 1);
  std::vector<float> got = x;
  rope_rotate(got.data(), hd, cs.data(), sn.data(), /*traditional=*/false);
  for (int j = 0; j < hd; ++j) {
    double th = pos * inv[j % half];
    double rot = j < half ? -x[j + half] : x[j - half];
    EXPECT_NEAR(got[j], x[j] * std::cos(th) + rot * std::sin(th), 1e-5) << j;
  }
  // Traditional layout rotates adjacent pairs.
  std::vector<float> trad = x;
  rope_rotate(trad.data(), hd, cs.data(), sn.data(), /*traditional=*/true);
  for (int i = 0; i < half; ++i) {
    double th = pos * inv[i];
    EXPECT_NEAR(trad[2 * i], x[2 * i] * std::cos(th) - x[2 * i + 1] * std::sin(th), 1e-5);
    EXPECT_NEAR(trad[2 * i + 1], x[2 * i] * std::sin(th) + x[2 * i + 1] * std::cos(th), 1e-5);
  }
}

// <R(p) q, R(s) k> depends only on p - s: the property attention relies on.
TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  const int64_t hd = 32, half = 16;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = std::pow(10000.0, -2.0 * i / hd);
  auto rotated = [&](std::vector<float> v, int64_t pos) {
    std::vector<float> cs(half), sn(half);
    rope_angles(inv.data(), half, pos, cs.data(), sn.data());
    rope_rotate(v.data(), hd, cs.data(), sn.data(), false);
    return v;
  };
  auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
    return s;
  };
  std::vector<float> q = randn(hd, 2), k = randn(hd, 3);
  double a = dot(rotated(q, 10), rotated(k, 3)), b = dot(rotated(q, 107), rotated(k, 100));
  EXPECT_NEAR(a, b, 1e-4);
  EXPECT_GT(std::abs(a - dot(q, k)), 1e-3);  // and the rotation did something
}

TEST(Kernels, RmsNormMatchesFormula) {
  const int64_t rows = 3, d = 24;
  std::vector<float> x = randn(rows * d, 4, 3.0f), w = randn(d, 5), out(rows * d);
  rms_norm(x.data(), w.data(), rows, d, 1e-5f, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i) ms += double(x[r * d + i]) * x[r * d + i] / d;
    for (int64_t i = 0; i < d; ++i)
      EXPECT_NEAR(out[r * d + i], x[r * d + i] / std::sqrt(ms + 1e-5) * w[i], 1e-5);
  }
  std::vector<float> inplace = x;  // aliasing input and output is allowed
  rms_norm(inplace.data(), w.data(), rows, d, 1e-5f, inplace.data());
  EXPECT_EQ(inplace, out);
}

TEST(Kernels, SoftmaxAndSilu) {
  std::vector<float> s = {1000.0f, 1001.0f, 999.0f};  // would overflow without the max shift
  softmax(s.data(), 3);
  double z = 1 + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(s[0], 1 / z, 1e-6);
  EXPECT_NEAR(s[1], std::exp(1.0) / z, 1e-6);
  std::vector<float> g = {-2.0f, 0.0f, 3.0f}, u = {1.0f, 5.0f, -2.0f};
  silu_mul(g.data(), u.data(), 3);
  EXPECT_NEAR(g[0], -2.0 / (1 + std::exp(2.0)), 1e-6);
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_NEAR(g[2], 3.0 / (1 + std::exp(-3.0)) * -2.0, 1e-5);
}

TEST(Kernels, MatmulNtMatchesLoopsWithBias) {
  const int64_t in = 7, out = 5;
  std::vector<float> w = randn(out * in, 6), b = randn(out, 7);
  for (int64_t n : {1, 4}) {
    std::vector<float> x = randn(n * in, 8), y(n * out);
    matmul_nt(x.data(), n, in, w.data(), out, b.data(), y.data());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < out; ++j) {
        double s = b[j];
        for (int64_t i = 0; i < in; ++i) s += double(x[r * in + i]) * w[j * in + i];
        EXPECT_NEAR(y[r * out + j], s, 1e-5) << n;
      }
  }
}

// OpenBLAS must not run its generic SSE3 kernels on a CPU with AVX2 (kernels/matmul.cc).
TEST(Kernels, BlasUsesVectorKernels) {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (forced && std::string(forced) != "SkylakeX" && std::string(forced) != "Haswell")
    GTEST_SKIP() << "OPENBLAS_CORETYPE=" << forced << " set by the user";
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2";
  std::string b = blas_backend();
  EXPECT_FALSE(testing::contains(b, "Prescott") || testing::contains(b, "Core2") ||
               testing::contains(b, "Nehalem"))
      << b;
}

// Naive O(n^2) grouped-query causal attention, one score at a time, in double.
std::vector<float> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, int64_t n, int64_t p0, int64_t nh,
                                   int64_t nkv, int64_t hd) {
  std::vector<float> out(n * nh * hd);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < nh; ++h) {
      int64_t g = h / (nh / nkv);
      std::vector<double> s(p0 + i + 1);
      double mx = -1e300, z = 0;
      for (int64_t j = 0; j <= p0 + i; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < hd; ++e)
          dot += double(q[(i * nh + h) * hd + e]) * k[(j * nkv + g) * hd + e];
        s[j] = dot / std::sqrt(double(hd));
        mx = std::max(mx, s[j]);
      }
      for (auto& x : s) z += (x = std::exp(x - mx));
      for (int64_t e = 0; e < hd; ++e) {
        double acc = 0;
        for (int64_t j = 0; j <= p0 + i; ++j) acc += s[j] / z * v[(j * nkv + g) * hd + e];
        out[(i * nh + h) * hd + e] = static_cast<float>(acc);
      }
    }
  return out;
}

TEST(Kernels, CausalAttentionMatchesNaiveReference) {
  const int64_t nh = 6, nkv = 2, hd = 8;
  for (int64_t p0 : {0, 5}) {
    for (int64_t n : {1, 9}) {
      const int64_t total = p0 + n;
      std::vector<float> q = randn(n * nh * hd, 10), k = randn(total * nkv * hd, 11, 2.0f),
                         v = randn(total * nkv * hd, 12), out(n * nh * hd);
      causal_attention(q.data(), k.data(), v.data(), n, p0, nh, nkv, hd,
                       static_cast<float>(1 / std::sqrt(double(hd))), out.data());
      std::vector<float> want = naive_attention(q, k, v, n, p0, nh, nkv, hd);
      EXPECT_LT(max_abs_diff(out, want), 1e-5) << "p0 " << p0 << " n " << n;
    }
  }
}

class TinyForward : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyForward, PrefillEqualsTokenByTokenDecode) {
  testing::TempDir dir;
  auto src = open_model(write_tiny_model(dir, tiny_json(GetParam())));
  ASSERT_TRUE(src.ok()) << src.error().message;
  int64_t calls = 0;
  auto t = Transformer::load(*src, RuntimeOptions{.reference = true},
                             [&](int64_t, int64_t) { ++calls; });
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(calls, static_cast<int64_t>(expected_tensors(src->config).size()));
  const int64_t V = (*t)->config().vocab_size, n = 40;
  std::vector<int32_t> toks(n);
  for (int64_t i = 0; i < n; ++i) toks[i] = static_cast<int32_t>((i * 37 + 11) % V);

  KvCache c1 = (*t)->new_cache(64);
  std::vector<float> all(n * V);
  ASSERT_TRUE((*t)->forward(toks, c1, all).ok());
  EXPECT_EQ(c1.n, n);
  EXPECT_GT(max_abs(all), 0.1);

  KvCache c2 = (*t)->new_cache(n);
  std::vector<float> one(V);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE((*t)->forward(std::span(toks).subspan(i, 1), c2, one, false).ok());
    std::span<const float> row(all.data() + i * V, V);
    worst = std::max(worst, max_abs_diff(row, one) / max_abs(row));
  }
  EXPECT_LT(worst, 1e-4);

  // Two chunks through the cache, last row only, equal the one-shot prefill's last row.
  KvCache c3 = (*t)->new_cache(n);
  std::vector<float> chunk(25 * V);
  ASSERT_TRUE((*t)->forward(std::span(toks).first(25), c3, chunk).ok());
  ASSERT_TRUE((*t)->forward(std::span(toks).subspan(25), c3, one, false).ok());
  std::span<const float> last(all.data() + (n - 1) * V, V);
  EXPECT_LT(max_abs_diff(last, one) / max_abs(last), 1e-4);

  // A cleared cache starts again at position 0.
  c3.clear();
  std::vector<float> first(V);
  ASSERT_TRUE((*t)->forward(std::span(toks).first(1), c3, first).ok());
  std::span<const float> row0(all.data(), V);
  EXPECT_LT(max_abs_diff(row0, first) / max_abs(row0), 1e-4);
}

TEST_P(TinyForward, BadCallsAreErrors) {
  testing::TempDir dir;
  auto src = open_model(write_tiny_model(dir, tiny_json(GetParam())));
  ASSERT_TRUE(src.ok()) << src.error().message;
  auto t = Transformer::load(*src, RuntimeOptions{.reference = true});
  ASSERT_TRUE(t.ok()) << t.error().message;
  const int64_t V = (*t)->config().vocab_size;
  std::vector<float> logits(4 * V);
  KvCache c = (*t)->new_cache(3);
  std::vector<int32_t> four = {1, 2, 3, 4}, bad = {1, static_cast<int32_t>(V)};
  Status st = (*t)->forward(four, c, logits);
  EXPECT_TRUE(!st.ok() && testing::contains(st.error().message, "capacity"));
  st = (*t)->forward(bad, c, logits);
  EXPECT_TRUE(!st.ok() && testing::contains(st.error().message, "outside the vocabulary"));
  st = (*t)->forward(std::span(four).first(2), c, std::span(logits).first(V));
  EXPECT_TRUE(!st.ok() && testing::contains(st.error().message, "logits buffer"));
  KvCache foreign;
  st = (*t)->forward(std::span(four).first(1), foreign, logits);
  EXPECT_TRUE(!st.ok() && testing::contains(st.error().message, "KV cache"));
  EXPECT_EQ(c.n, 0);  // failed calls leave the cache alone
}

// The fast runtime (packed kernels, thread pool, decode attention) against the reference, on
// prefill (strip kernels + BLAS attention) and on single-token decode steps.
TEST_P(TinyForward, FastRuntimeEqualsReference) {
  testing::TempDir dir;
  auto src = open_model(write_tiny_model(dir, tiny_json(GetParam())));
  ASSERT_TRUE(src.ok()) << src.error().message;
  auto ref = Transformer::load(*src, RuntimeOptions{.reference = true});
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  // f32 cache: equal up to summation order. f16: keys and values rounded to 11 bits, which this
  // tiny random model (sharp attention) turns into ~5e-3 of the logits; on SmolLM2 the PPL moves
  // by far less (tests/oracle/test_fast_runtime.py).
  for (auto [threads, kv] : {std::pair{1, KvType::kF32}, {3, KvType::kF32}, {3, KvType::kF16}}) {
    SCOPED_TRACE(kv == KvType::kF16 ? "f16 cache" : "f32 cache");
    const double tol = kv == KvType::kF16 ? 1e-2 : 1e-5;
    auto fast = Transformer::load(*src, RuntimeOptions{.threads = threads, .kv_cache = kv});
    ASSERT_TRUE(fast.ok()) << fast.error().message;
    EXPECT_TRUE(testing::contains((*fast)->runtime_name(), "fast")) << (*fast)->runtime_name();
    EXPECT_EQ((*fast)->threads(), threads);
    EXPECT_EQ((*fast)->bytes_per_token(), (*ref)->bytes_per_token());
    // 20 tokens: kernel products and blocked attention; 150: OpenBLAS products and attention
    // (with --activations auto, on matrices the AMX kernel does not take), then decode steps
    // whose attention is merged from several position ranges when threads > 1.
    for (const int64_t n : {int64_t{20}, int64_t{150}}) {
      SCOPED_TRACE("prompt " + std::to_string(n));
      const int64_t V = (*ref)->config().vocab_size;
      std::vector<int32_t> toks(n);
      for (int64_t i = 0; i < n; ++i) toks[i] = static_cast<int32_t>((i * 53 + 7) % V);
      KvCache cr = (*ref)->new_cache(n + 3), cf = (*fast)->new_cache(n + 3);
      std::vector<float> lr(n * V), lf(n * V);
      ASSERT_TRUE((*ref)->forward(toks, cr, lr).ok());
      ASSERT_TRUE((*fast)->forward(toks, cf, lf).ok());
      EXPECT_LT(max_abs_diff(lr, lf) / max_abs(lr), tol);
      for (int step = 0; step < 3; ++step) {
        const int32_t t = static_cast<int32_t>((step * 101 + 5) % V);
        ASSERT_TRUE((*ref)->forward(std::span(&t, 1), cr, std::span(lr).first(V)).ok());
        ASSERT_TRUE((*fast)->forward(std::span(&t, 1), cf, std::span(lf).first(V)).ok());
        EXPECT_LT(max_abs_diff(std::span(lr).first(V), std::span(lf).first(V)) /
                      max_abs(std::span(lr).first(V)),
                  tol)
            << "decode step " << step;
      }
      // A short batch (5 tokens: the decode attention path, one task per token and range).
      std::vector<int32_t> five = {3, 1, 4, 1, 5};
      std::vector<float> fr(5 * V), ff(5 * V);
      KvCache cr5 = (*ref)->new_cache(n + 5), cf5 = (*fast)->new_cache(n + 5);
      ASSERT_TRUE((*ref)->forward(toks, cr5, lr).ok());
      ASSERT_TRUE((*fast)->forward(toks, cf5, lf).ok());
      ASSERT_TRUE((*ref)->forward(five, cr5, fr).ok());
      ASSERT_TRUE((*fast)->forward(five, cf5, ff).ok());
      EXPECT_LT(max_abs_diff(fr, ff) / max_abs(fr), tol) << "5-token batch";
      EXPECT_EQ(cf.n, n + 3);
    }
    // A cache of the other runtime (or the other element type) is refused.
    KvCache other = (*ref)->new_cache(8);
    std::vector<float> logits((*ref)->config().vocab_size);
    const int32_t one = 1;
    Status st = (*fast)->forward(std::span(&one, 1), other, logits);
    EXPECT_TRUE(!st.ok() && testing::contains(st.error().message, "KV cache")) << st.ok();
  }
}

// Several sequences in one call (a prefill beside two decodes at other positions) give each the
// logits and cache it gets alone, on both runtimes.
TEST_P(TinyForward, BatchOfSequencesEqualsEachAlone) {
  testing::TempDir dir;
  auto src = open_model(write_tiny_model(dir, tiny_json(GetParam())));
  ASSERT_TRUE(src.ok()) << src.error().message;
  for (const bool reference : {true, false}) {
    SCOPED_TRACE(reference ? "reference" : "fast");
    auto t = Transformer::load(*src, RuntimeOptions{.reference = reference, .threads = 2});
    ASSERT_TRUE(t.ok()) << t.error().message;
    const int64_t V = (*t)->config().vocab_size;
    const std::vector<std::vector<int32_t>> prefix = {{}, {5, 9, 2}, {7, 7, 1, 3, 8, 4, 2, 6, 9}};
    const std::vector<std::vector<int32_t>> next = {{3, 1, 4, 1, 5}, {6}, {2}};
    std::vector<KvCache> alone, batched;
    std::vector<std::vector<float>> want, got;
    for (size_t s = 0; s < 3; ++s) {
      for (auto* v : {&alone, &batched}) {
        v->push_back((*t)->new_cache(16));
        std::vector<float> lg(prefix[s].size() * V + V);
        if (!prefix[s].empty()) {
          ASSERT_TRUE((*t)->forward(prefix[s], v->back(), lg).ok());
        }
      }
      const bool all = s == 0;
      want.emplace_back(all ? next[s].size() * V : V);
      got.emplace_back(want.back().size());
      ASSERT_TRUE((*t)->forward(next[s], alone[s], want[s], all).ok());
    }
    std::vector<SeqStep> steps;
    for (size_t s = 0; s < 3; ++s) steps.push_back({next[s], &batched[s], got[s], s == 0});
    ASSERT_TRUE((*t)->forward_batch(steps).ok());
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_LT(max_abs_diff(want[s], got[s]) / max_abs(want[s]), 1e-5) << "sequence " << s;
      EXPECT_EQ(batched[s].n, alone[s].n);
    }
    // A cache given twice, or an empty sequence, is refused before anything runs.
    steps[1].cache = steps[0].cache;
    Status st = (*t)->forward_batch(steps);
    EXPECT_TRUE(!st.ok() && testing::contains(st.error().message, "share a cache"));
    steps[1] = {std::span<const int32_t>(), &batched[1], got[1], false};
    st = (*t)->forward_batch(steps);
    EXPECT_TRUE(!st.ok() && testing::contains(st.error().message, "sequence 1: no tokens"));
  }
}

// batch_invariant: decode steps of several sequences and a prefill in one call give each the
// very bits it gets alone (one-token rows on the per-token kernels, the others on the tiles,
// whatever the batch; with prepacked codes all on the lanes), on a 4-bit model.
TEST_P(TinyForward, BatchInvariantDecodeIsBitIdenticalToAlone) {
  testing::TempDir dir;
  auto src = open_model(write_tiny_q4_model(dir, GetParam()));
  ASSERT_TRUE(src.ok()) << src.error().message;
  for (const Prepack pp : {Prepack::kOn, Prepack::kOff}) {
    SCOPED_TRACE(pp == Prepack::kOn ? "prepacked" : "not prepacked");
    auto t = Transformer::load(
        *src, RuntimeOptions{.threads = 2, .prepack = pp, .batch_invariant = true});
    ASSERT_TRUE(t.ok()) << t.error().message;
    const int64_t V = (*t)->config().vocab_size;
    for (const int nseq : {1, 3, 4, 6}) {
      SCOPED_TRACE(std::to_string(nseq) + " sequences");
      std::vector<KvCache> alone, batched;
      std::vector<std::vector<float>> want(nseq, std::vector<float>(V)), got = want;
      std::vector<int32_t> next(nseq);
      std::vector<SeqStep> steps;
      for (int s = 0; s < nseq; ++s) {
        std::vector<int32_t> prompt(3 + 2 * s);
        for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = (i * 29 + s * 13 + 1) % V;
        std::vector<float> lg(prompt.size() * V);
        for (auto* v : {&alone, &batched}) {
          v->push_back((*t)->new_cache(32));
          ASSERT_TRUE((*t)->forward(prompt, v->back(), lg).ok());
        }
        next[s] = (s * 17 + 4) % V;
        ASSERT_TRUE((*t)->forward(std::span(&next[s], 1), alone[s], want[s], false).ok());
      }
      for (int s = 0; s < nseq; ++s)
        steps.push_back({std::span<const int32_t>(&next[s], 1), &batched[s], got[s], false});
      // And a prompt of 6 tokens prefilled beside them, all its logits.
      const std::vector<int32_t> prompt = {4, 8, 15, 16, 23, 42};
      KvCache pa = (*t)->new_cache(16), pb = (*t)->new_cache(16);
      std::vector<float> pwant(prompt.size() * V), pgot(pwant.size());
      ASSERT_TRUE((*t)->forward(prompt, pa, pwant).ok());
      steps.insert(steps.begin() + nseq / 2, SeqStep{prompt, &pb, pgot, true});
      ASSERT_TRUE((*t)->forward_batch(steps).ok());
      for (int s = 0; s < nseq; ++s) EXPECT_EQ(want[s], got[s]) << "sequence " << s;
      EXPECT_EQ(pwant, pgot) << "prefill";
    }
  }
}

// --prepack 4bit (auto's choice from DRAM on AMD CPUs): the 4-bit attention matrices take the
// lanes, the 3-bit MLP keeps its own kernels, and the logits are the unprepacked runtime's.
TEST_P(TinyForward, FourBitPrepackOfAMixedModelEqualsUnpacked) {
  testing::TempDir dir;
  auto src = open_model(write_tiny_q4_model(dir, GetParam(), /*mlp_bits=*/3));
  ASSERT_TRUE(src.ok()) << src.error().message;
  auto off = Transformer::load(*src, RuntimeOptions{.threads = 2, .prepack = Prepack::kOff});
  auto four = Transformer::load(*src, RuntimeOptions{.threads = 2, .prepack = Prepack::kFourBit});
  auto on = Transformer::load(*src, RuntimeOptions{.threads = 2, .prepack = Prepack::kOn});
  ASSERT_TRUE(off.ok() && four.ok() && on.ok());
  // Where the lanes kernel exists (AVX-512 VNNI/VBMI) both prepacking runtimes say so.
  EXPECT_EQ(testing::contains((*four)->runtime_name(), "prepacked"),
            testing::contains((*on)->runtime_name(), "prepacked"));
  EXPECT_FALSE(testing::contains((*off)->runtime_name(), "prepacked"));
  const int64_t V = (*off)->config().vocab_size;
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 31 + 5) % V);
  KvCache ca = (*off)->new_cache(64), cb = (*four)->new_cache(64);
  std::vector<float> want(prompt.size() * V), got(want.size());
  ASSERT_TRUE((*off)->forward(prompt, ca, want).ok());
  ASSERT_TRUE((*four)->forward(prompt, cb, got).ok());
  EXPECT_LT(max_abs_diff(want, got) / max_abs(want), 1e-4) << "prefill";
  for (int32_t tok : {3, 9, 27}) {
    std::vector<float> a(V), b(V);
    ASSERT_TRUE((*off)->forward(std::span(&tok, 1), ca, a, false).ok());
    ASSERT_TRUE((*four)->forward(std::span(&tok, 1), cb, b, false).ok());
    EXPECT_LT(max_abs_diff(a, b) / max_abs(a), 1e-4) << "decode of " << tok;
  }
}

// per_token: a call over several tokens gives each row the bits of feeding the tokens one call
// at a time (speculative checks rely on it), alone or beside other sequences, on both caches.
TEST_P(TinyForward, PerTokenCallIsBitIdenticalToOneAtATime) {
  testing::TempDir dir;
  auto src = open_model(write_tiny_q4_model(dir, GetParam()));
  ASSERT_TRUE(src.ok()) << src.error().message;
  for (const bool inv : {false, true})
    for (const KvType kv : {KvType::kF16, KvType::kF32}) {
      SCOPED_TRACE(std::string(inv ? "batch invariant, " : "") +
                   (kv == KvType::kF16 ? "f16 cache" : "f32 cache"));
      auto t = Transformer::load(
          *src, RuntimeOptions{.threads = 2, .kv_cache = kv, .batch_invariant = inv});
      ASSERT_TRUE(t.ok()) << t.error().message;
      const int64_t V = (*t)->config().vocab_size;
      // Over 64 positions, so decode attention splits the positions into ranges.
      std::vector<int32_t> prompt(90);
      for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 29 + 1) % V);
      const std::vector<int32_t> next = {7, 1, 30, 2, 11, 13};
      std::vector<float> lg(prompt.size() * V);
      KvCache one = (*t)->new_cache(128), all = (*t)->new_cache(128), other = (*t)->new_cache(128);
      for (KvCache* c : {&one, &all, &other}) ASSERT_TRUE((*t)->forward(prompt, *c, lg).ok());
      std::vector<float> want(next.size() * V), got(want.size()), side(V);
      for (size_t i = 0; i < next.size(); ++i)
        ASSERT_TRUE(
            (*t)->forward(std::span(&next[i], 1), one, std::span(want).subspan(i * V, V), false)
                .ok());
      // Beside a one-token decode and after it in the call, so the row order is exercised.
      const int32_t tok = 4;
      const SeqStep steps[2] = {{std::span(&tok, 1), &other, side, false},
                                {next, &all, got, true, /*per_token=*/true}};
      ASSERT_TRUE((*t)->forward_batch(steps).ok());
      EXPECT_EQ(all.n, one.n);
      for (size_t i = 0; i < next.size(); ++i)
        EXPECT_EQ(std::vector<float>(want.begin() + i * V, want.begin() + (i + 1) * V),
                  std::vector<float>(got.begin() + i * V, got.begin() + (i + 1) * V))
            << "token " << i;
    }
}

// The prompt cache's promise (serve/prompt_cache.h): with batch_invariant, a position's keys,
// values and logits have the same bits however the prompt was cut into prefill steps (one
// token too), beside decoding rows or not, and blocks copied out of one cache into another (of
// another capacity) continue the prefill to the very logits of a cold run; prepacked or not.
TEST_P(TinyForward, ChunkingAndCopiedBlocksGiveColdBits) {
  testing::TempDir dir;
  auto src = open_model(write_tiny_q4_model(dir, GetParam()));
  ASSERT_TRUE(src.ok()) << src.error().message;
  for (const Prepack pp : {Prepack::kOn, Prepack::kOff})
    for (const KvType kv : {KvType::kF16, KvType::kF32}) {
      SCOPED_TRACE(std::string(pp == Prepack::kOn ? "prepacked, " : "") +
                   (kv == KvType::kF16 ? "f16 cache" : "f32 cache"));
      auto t = Transformer::load(
          *src,
          RuntimeOptions{.threads = 2, .kv_cache = kv, .prepack = pp, .batch_invariant = true});
      ASSERT_TRUE(t.ok()) << t.error().message;
      const int64_t V = (*t)->config().vocab_size, len = 600;
      std::vector<int32_t> prompt(len);
      for (int64_t i = 0; i < len; ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % V);
      // A sequence decoding beside some steps (its own cache), as in tq serve.
      KvCache side = (*t)->new_cache(len);
      std::vector<float> side_lg(V);
      int32_t side_tok = 3;
      // Prefill steps from cache.n to len ending at `ends` (beside a decode row at every other).
      auto prefill = [&](KvCache& c, std::vector<int64_t> ends, std::vector<float>& lg) {
        for (size_t i = 0; i < ends.size(); ++i) {
          std::vector<SeqStep> steps = {{.tokens = std::span(prompt).subspan(c.n, ends[i] - c.n),
                                         .cache = &c,
                                         .logits = lg,
                                         .prefill = true}};
          if (i % 2 == 1 && side.n < side.capacity)
            steps.insert(steps.begin(), SeqStep{.tokens = std::span(&side_tok, 1),
                                                .cache = &side,
                                                .logits = side_lg,
                                                .per_token = true});
          ASSERT_TRUE((*t)->forward_batch(steps).ok());
        }
      };
      std::vector<float> cold(V), got(V);
      KvCache ref = (*t)->new_cache(len + 50);
      prefill(ref, {128, 256, 384, 512, len}, cold);  // as tq serve cuts it cold: multiples of 128
      auto shape = kv_block_shape(ref, (*t)->config());
      ASSERT_TRUE(shape.ok()) << shape.error().message;
      auto block = [&](const KvCache& c, int64_t b) {
        std::vector<uint8_t> bytes(static_cast<size_t>(shape->bytes()));
        kv_block_read(c, *shape, b, bytes);
        return bytes;
      };
      for (const std::vector<int64_t>& ends :  // other chunk lengths, down to one token
           {std::vector<int64_t>{16, 48, 128, 140, 511, 513, 530, len},
            std::vector<int64_t>{1,   2,   5,   16,  17,  19,  48,  50,  126, 127, 128, 130,
                                 140, 148, 149, 509, 510, 511, 512, 513, 514, 520, 599, len}}) {
        KvCache c = (*t)->new_cache(len);
        prefill(c, ends, got);
        EXPECT_EQ(cold, got);
        for (int64_t b = 0; b < len / 16; ++b)
          EXPECT_EQ(block(ref, b), block(c, b)) << "block " << b;
      }
      // Blocks copied into a cache of another capacity, then the prefill continued.
      for (const int64_t blocks : {int64_t{1}, int64_t{7}, int64_t{8}}) {
        SCOPED_TRACE(std::to_string(blocks) + " cached blocks");
        KvCache c = (*t)->new_cache(len + 33);
        for (int64_t b = 0; b < blocks; ++b) kv_block_write(c, *shape, b, block(ref, b));
        c.n = blocks * 16;
        std::vector<int64_t> ends;
        if (c.n < 128) ends.push_back(128);
        ends.push_back(len);
        prefill(c, ends, got);
        EXPECT_EQ(cold, got);
        for (int64_t b = 0; b < len / 16; ++b)
          EXPECT_EQ(block(ref, b), block(c, b)) << "block " << b;
      }
      {  // why the flag: a one-token call that is not a prefill step takes the decode paths
        KvCache c = (*t)->new_cache(len);
        prefill(c, {128, len - 1}, got);
        ASSERT_TRUE((*t)->forward(std::span(prompt).subspan(len - 1, 1), c, got, false).ok());
        EXPECT_NE(cold, got);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Families, TinyForward, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(TransformerLoad, UnsupportedRopeScalingIsAnError) {
  testing::TempDir dir;
  nlohmann::json j = tiny_json("llama");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  auto src = open_model(write_tiny_model(dir, j));
  ASSERT_TRUE(src.ok()) << src.error().message;
  auto t = Transformer::load(*src, RuntimeOptions{.reference = true});
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(testing::contains(t.error().message, "yarn")) << t.error().message;
}

}  // namespace
}  // namespace tq
