// The f32 decoder's backward (model/f32_backward.h), matrices and norm weights, against central
// finite differences of its own forward, for every family it covers: untied llama with llama3 RoPE,
// qwen2 (biases, tied), qwen3 (per-head norms, tied), two sequences in one batch.
#include "model/f32_backward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "../testing/tiny_models.h"
#include "model/rope.h"

namespace tq {
namespace {

// tiny_json: 2 layers, hidden 48, 6 query and 2 KV heads of 8, vocabulary 70; llama untied
// with llama3 RoPE, qwen2 and qwen3 tied.
ModelConfig config(const std::string& type) {
  auto c = parse_model_config(testing::tiny_json(type), "config.json");
  EXPECT_TRUE(c.ok()) << c.error().message;
  return *c;
}

F32Tensors random_model(const ModelConfig& c) {
  F32Tensors t;
  uint32_t seed = 7;
  Status st = load_model_tensors(
      c, t,
      [&](const TensorSpec& s, std::vector<float>& dst) {
        std::mt19937 rng(seed++);
        const bool norm = s.shape.size() == 1 && s.name.find("norm") != std::string::npos;
        std::normal_distribution<float> nd(norm ? 1.0f : 0.0f, norm ? 0.2f : 0.3f);
        dst.resize(static_cast<size_t>(shape_numel(s.shape)));
        for (float& x : dst) x = nd(rng);
        return ok_status();
      },
      [](int64_t, int64_t) {});
  EXPECT_TRUE(st.ok()) << st.error().message;
  return t;
}

// L = Σ c ⊙ logits for a fixed random c, in double.
double loss(F32Backprop& bp, const F32Tensors& t, const std::vector<int32_t>& tokens, int64_t n,
            int64_t seqs, const std::vector<float>& c) {
  std::vector<float> logits(c.size());
  bp.forward(t, tokens, n, seqs, logits.data());
  double s = 0.0;
  for (size_t i = 0; i < c.size(); ++i) s += static_cast<double>(c[i]) * logits[i];
  return s;
}

void check_family(const std::string& type, ThreadPool* pool = nullptr) {
  SCOPED_TRACE(type);
  const ModelConfig c = config(type);
  ASSERT_TRUE(F32Backprop::supports(c).ok());
  F32Tensors t = random_model(c);
  F32Backprop bp(c, *rope_inv_freq(c), pool);
  const int64_t n = 6, seqs = 2;
  std::vector<int32_t> tokens = {3, 17, 5, 3, 69, 0, 11, 11, 2, 30, 8, 17};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> cvec(static_cast<size_t>(n * seqs * c.vocab_size));
  for (float& x : cvec) x = nd(rng);
  std::vector<float> logits(cvec.size());
  bp.forward(t, tokens, n, seqs, logits.data());
  std::map<std::pair<int, int64_t>, std::vector<float>> grads;
  size_t norms = 0;
  bp.backward(
      t, cvec.data(), [](TensorRole, int64_t) { return true; },
      [&](TensorRole r, int64_t l, const float* dw, int64_t out, int64_t in) {
        grads[{static_cast<int>(r), l}].assign(dw, dw + out * in);
        norms += out == 1;
      });
  // Every matrix of the model reported once (a tied embedding once, as the embedding), and
  // every norm's weight: two per layer (four with qwen3's q/k norms) and the final one.
  const bool qk_norm = !t.layers[0].q_norm.empty();
  EXPECT_EQ(norms, (qk_norm ? 4u : 2u) * 2u + 1u);
  EXPECT_EQ(grads.size() - norms, 7u * 2u + (t.tied ? 1u : 2u));
  int checked = 0;
  for (auto& [key, g] : grads) {
    const TensorRole role = static_cast<TensorRole>(key.first);
    std::vector<float>* w = nullptr;
    with_model_tensor(t, role, key.second, [&](auto& f) {
      if constexpr (std::is_same_v<std::decay_t<decltype(f)>, std::vector<float>>) w = &f;
    });
    ASSERT_NE(w, nullptr);
    ASSERT_EQ(w->size(), g.size());
    // The four largest gradients of the matrix and one at random.
    std::vector<size_t> idx(g.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + 4, idx.end(),
                      [&](size_t a, size_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    idx.resize(4);
    idx.push_back(static_cast<size_t>(rng() % g.size()));
    for (size_t i : idx) {
      const float w0 = (*w)[i], h = 1e-2f;
      (*w)[i] = w0 + h;
      const double lp = loss(bp, t, tokens, n, seqs, cvec);
      (*w)[i] = w0 - h;
      const double lm = loss(bp, t, tokens, n, seqs, cvec);
      (*w)[i] = w0;
      const double fd = (lp - lm) / (2.0 * h);
      EXPECT_NEAR(g[i], fd, 2e-2 * std::fabs(fd) + 2e-3)
          << "tensor role " << key.first << " layer " << key.second << " index " << i;
      ++checked;
    }
  }
  EXPECT_GE(checked, 100);
}

TEST(F32Backprop, MatchesFiniteDifferencesLlama) { check_family("llama"); }
TEST(F32Backprop, MatchesFiniteDifferencesQwen2) { check_family("qwen2"); }
TEST(F32Backprop, MatchesFiniteDifferencesQwen3) { check_family("qwen3"); }

// With a pool the element-wise and per-row work is split between threads (distillation's
// setting): the same finite differences hold, and the gradients equal the one-thread ones
// (norm weights summed per slice: within rounding).
TEST(F32Backprop, ThreadedMatchesFiniteDifferencesAndOneThread) {
  ThreadPool pool(2);
  check_family("qwen3", &pool);
  const ModelConfig c = config("llama");
  F32Tensors t = random_model(c);
  std::vector<int32_t> tokens = {3, 17, 5, 3, 69, 0, 11, 11, 2, 30, 8, 17, 40, 41, 2, 9};
  const int64_t n = 8, seqs = 2;
  std::vector<float> cvec(static_cast<size_t>(n * seqs * c.vocab_size));
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : cvec) x = nd(rng);
  auto grads = [&](ThreadPool* p) {
    F32Backprop bp(c, *rope_inv_freq(c), p);
    std::vector<float> logits(cvec.size());
    bp.forward(t, tokens, n, seqs, logits.data());
    std::map<std::pair<int, int64_t>, std::vector<float>> g;
    bp.backward(
        t, cvec.data(), [](TensorRole, int64_t) { return true; },
        [&](TensorRole r, int64_t l, const float* dw, int64_t out, int64_t in) {
          g[{static_cast<int>(r), l}].assign(dw, dw + out * in);
        });
    return g;
  };
  const auto one = grads(nullptr), two = grads(&pool);
  ASSERT_EQ(one.size(), two.size());
  for (const auto& [key, g] : one) {
    const std::vector<float>& h = two.at(key);
    ASSERT_EQ(g.size(), h.size());
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], h[i], 1e-5f * std::fabs(g[i]) + 1e-6f)
          << "role " << key.first << " layer " << key.second << " index " << i;
  }
}

TEST(F32Backprop, RefusesGatedDeltaNet) {
  ModelConfig c = config("llama");
  c.family = Family::kQwen35;
  const Status st = F32Backprop::supports(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("Gated DeltaNet"), std::string::npos);
}

}  // namespace
}  // namespace tq
