#include "recipe/sensitivity_measure.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "formats/mlx_encode.h"
#include "formats/mlx_quant.h"

namespace tq {

namespace {

// The mixer half of a layer (attention, or qwen3_5's Gated DeltaNet).
bool is_attention(TensorRole r) {
  using R = TensorRole;
  return r == R::kAttnQ || r == R::kAttnK || r == R::kAttnV || r == R::kAttnO || r == R::kLinQkv ||
         r == R::kLinZ || r == R::kLinB || r == R::kLinA || r == R::kLinOut;
}

float round_to(float x, DType t) {
  switch (t) {
    case DType::kBF16:
      return bf16_to_f32(f32_to_bf16(x));
    case DType::kF16:
      return f16_to_f32(f32_to_f16(x));
    default:
      return x;
  }
}

// log sum_i exp(x_i), accumulated in f64.
double log_sum_exp(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  return static_cast<double>(m) + std::log(s);
}

// exp(x) for x <= 0 within 2 ulp of std::exp (Cephes expf: x = k ln2 + r, |r| <= ln2/2, a
// degree-6 polynomial of r, times 2^k). Branch-free, so the loops over it vectorize.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln2)
  const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// KL(p || softmax(x)) = sum p log p - sum p x + logsumexp(x) over one vocabulary row; the sums
// run in 16 independent lanes (so they vectorize at the baseline ISA) and meet in f64.
double row_kl(const float* p, const float* x, int64_t n, double neg_entropy) {
  constexpr int kLanes = 16;
  float mx[kLanes];
  for (int j = 0; j < kLanes; ++j) mx[j] = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) mx[j] = mx[j] < x[i + j] ? x[i + j] : mx[j];
  float m = *std::max_element(mx, mx + kLanes);
  for (int64_t t = i; t < n; ++t) m = std::max(m, x[t]);
  double e[kLanes] = {}, d[kLanes] = {};
  for (i = 0; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      e[j] += static_cast<double>(exp_nonpositive(x[i + j] - m));
      d[j] += static_cast<double>(p[i + j]) * static_cast<double>(x[i + j]);
    }
  double es = 0, ds = 0;
  for (int j = 0; j < kLanes; ++j) es += e[j], ds += d[j];
  for (int64_t t = i; t < n; ++t) {
    es += static_cast<double>(exp_nonpositive(x[t] - m));
    ds += static_cast<double>(p[t]) * static_cast<double>(x[t]);
  }
  return neg_entropy - ds + static_cast<double>(m) + std::log(es);
}

}  // namespace

std::vector<ModuleSensitivity> quantizable_modules(const ModelConfig& cfg, DType dtype) {
  std::vector<ModuleSensitivity> out;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    if (!s.kind->quantizable || s.shape.size() != 2 || s.kind->companion()) continue;
    ModuleSensitivity m;
    const std::string suffix = ".weight";
    m.name = s.name.ends_with(suffix) ? s.name.substr(0, s.name.size() - suffix.size()) : s.name;
    m.role = s.kind->role;
    m.layer = s.layer;
    m.shape = s.shape;
    m.params = static_cast<uint64_t>(shape_numel(s.shape));
    m.float_bytes = m.params * dtype_size(dtype);
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<float>> rtn_roundtrip(std::span<const float> w, int64_t rows, int64_t cols,
                                         const QuantSpec& spec, DType dtype) {
  std::vector<float> r(w.size());
  for (size_t i = 0; i < w.size(); ++i) r[i] = round_to(w[i], dtype);
  std::vector<uint8_t> q, scales, biases;
  TQ_CHECK_OK(quantize_mlx(spec, rows, cols, r, dtype, &q, &scales, &biases));
  const DType scale_dtype = quant_mode_has_biases(spec.mode) ? dtype : DType::kU8;
  TQ_CHECK_OK(dequantize_mlx(spec, rows, cols, q, scale_dtype, scales, biases, r));
  return r;
}

Result<SensitivityMeter> SensitivityMeter::prepare(const F32Model& runner, const CalibWindows& w) {
  const ModelConfig& c = runner.config();
  const int64_t n = w.seq_len, d = c.hidden_size, V = c.vocab_size;
  const int64_t scored = n - w.first_target;
  if (w.count <= 0 || n < 2 || scored <= 0 || static_cast<int64_t>(w.tokens.size()) != w.count * n)
    return err("sensitivity: bad calibration windows");
  for (int32_t t : w.tokens)
    if (t < 0 || t >= V) return err("sensitivity: token id {} outside the vocabulary", t);
  SensitivityMeter s;
  s.runner_ = &runner;
  s.w_ = &w;
  const size_t L = static_cast<size_t>(c.num_hidden_layers);
  s.x_in_.assign(L + 1, std::vector<std::vector<float>>(static_cast<size_t>(w.count)));
  s.x_mid_.assign(L, std::vector<std::vector<float>>(static_cast<size_t>(w.count)));
  s.p_ref_.resize(static_cast<size_t>(w.count));
  s.neg_entropy_.resize(static_cast<size_t>(w.count));
  // All windows as one batch of sequences: x [count, n, d].
  std::vector<float> x(static_cast<size_t>(w.count * n * d)), logits(static_cast<size_t>(n * V));
  for (int64_t k = 0; k < w.count; ++k)
    runner.embed({w.tokens.data() + k * n, static_cast<size_t>(n)}, x.data() + k * n * d);
  auto keep = [&](std::vector<std::vector<float>>& dst) {
    for (int64_t k = 0; k < w.count; ++k)
      dst[static_cast<size_t>(k)].assign(x.begin() + k * n * d, x.begin() + (k + 1) * n * d);
  };
  for (size_t l = 0; l < L; ++l) {
    keep(s.x_in_[l]);
    runner.attention_half(static_cast<int64_t>(l), x.data(), n, nullptr, w.count);
    keep(s.x_mid_[l]);
    runner.mlp_half(static_cast<int64_t>(l), x.data(), n * w.count);
  }
  keep(s.x_in_[L]);
  for (int64_t k = 0; k < w.count; ++k) {
    runner.head(x.data() + k * n * d, n, logits.data());
    // Reference probabilities of the scored rows, and sum p log p per row.
    std::vector<float>& p = s.p_ref_[k];
    p.resize(static_cast<size_t>(scored * V));
    s.neg_entropy_[k].resize(static_cast<size_t>(scored));
    for (int64_t j = 0; j < scored; ++j) {
      const float* row = logits.data() + (w.first_target - 1 + j) * V;
      const double lse = log_sum_exp(row, V);
      double ne = 0;
      for (int64_t i = 0; i < V; ++i) {
        const double lp = static_cast<double>(row[i]) - lse;
        const double pi = std::exp(lp);
        p[static_cast<size_t>(j * V + i)] = static_cast<float>(pi);
        ne += pi * lp;
      }
      s.neg_entropy_[k][static_cast<size_t>(j)] = ne;
    }
  }
  return s;
}

double SensitivityMeter::window_kl(const float* logits, int64_t k) const {
  const int64_t V = runner_->config().vocab_size, scored = w_->seq_len - w_->first_target;
  const size_t kk = static_cast<size_t>(k);
  double total = 0;
  for (int64_t j = 0; j < scored; ++j)
    total += row_kl(p_ref_[kk].data() + j * V, logits + (w_->first_target - 1 + j) * V, V,
                    neg_entropy_[kk][static_cast<size_t>(j)]);
  return total;
}

double SensitivityMeter::mean_kl(const ModuleSensitivity& m,
                                 std::span<const float> w_module) const {
  const float* w[] = {w_module.data()};
  return mean_kls(m, w)[0];
}

// All variants and windows go through the layers after the module as one batch of
// variants × windows sequences: a few large matrix products instead of many small ones.
std::vector<double> SensitivityMeter::mean_kls(const ModuleSensitivity& m,
                                               std::span<const float* const> variants) const {
  const F32Model& r = *runner_;
  const ModelConfig& c = r.config();
  const int64_t n = w_->seq_len, V = c.vocab_size, L = c.num_hidden_layers, d = c.hidden_size;
  const int64_t count = w_->count, S = static_cast<int64_t>(variants.size());
  const int64_t scored = n - w_->first_target, seq = n * d;
  std::vector<WeightOverride> ov;
  for (const float* w : variants) ov.push_back({m.role, w});
  std::vector<float> x(static_cast<size_t>(S * count * seq));
  auto seq_x = [&](int64_t s, int64_t k) { return x.data() + (s * count + k) * seq; };
  int64_t next_layer = 0;
  const bool head_override =
      m.role == TensorRole::kLmHead || (m.role == TensorRole::kEmbed && c.tie_word_embeddings);
  for (int64_t s = 0; s < S; ++s) {
    const WeightOverride* o = &ov[static_cast<size_t>(s)];
    for (int64_t k = 0; k < count; ++k) {
      const size_t kk = static_cast<size_t>(k);
      if (m.role == TensorRole::kEmbed)
        r.embed({w_->tokens.data() + k * n, static_cast<size_t>(n)}, seq_x(s, k), o);
      else if (m.role == TensorRole::kLmHead)
        std::copy(x_in_[static_cast<size_t>(L)][kk].begin(),
                  x_in_[static_cast<size_t>(L)][kk].end(), seq_x(s, k));
      else if (is_attention(m.role))
        std::copy(x_in_[static_cast<size_t>(m.layer)][kk].begin(),
                  x_in_[static_cast<size_t>(m.layer)][kk].end(), seq_x(s, k));
      else
        std::copy(x_mid_[static_cast<size_t>(m.layer)][kk].begin(),
                  x_mid_[static_cast<size_t>(m.layer)][kk].end(), seq_x(s, k));
    }
    // The module's own layer: one batch of the windows per variant.
    if (m.role == TensorRole::kLmHead) {
      next_layer = L;
    } else if (m.role != TensorRole::kEmbed) {
      if (is_attention(m.role))
        r.layer(m.layer, seq_x(s, 0), n, o, count);
      else
        r.mlp_half(m.layer, seq_x(s, 0), count * n, o);
      next_layer = m.layer + 1;
    }
  }
  for (int64_t l = next_layer; l < L; ++l) r.layer(l, x.data(), n, nullptr, S * count);
  std::vector<double> kl(static_cast<size_t>(S), 0.0);
  std::vector<float> logits(static_cast<size_t>(n * V));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t k = 0; k < count; ++k) {
      r.head(seq_x(s, k), n, logits.data(), head_override ? &ov[static_cast<size_t>(s)] : nullptr);
      kl[static_cast<size_t>(s)] += window_kl(logits.data(), k);
    }
  for (double& v : kl) v /= static_cast<double>(count * scored);
  return kl;
}

Status SensitivityMeter::measure(ModuleSensitivity& m, std::span<const QuantSpec> specs,
                                 DType dtype, const std::function<void()>& step,
                                 int scale_above_bits) const {
  const int64_t layer =
      m.role == TensorRole::kEmbed || m.role == TensorRole::kLmHead ? -1 : m.layer;
  std::span<const float> w = runner_->weight(m.role, layer);
  const int64_t rows = m.shape[0], cols = m.shape[1];
  if (static_cast<int64_t>(w.size()) != rows * cols)
    return err("sensitivity: module {} has no weight of shape [{}, {}]", m.name, rows, cols);
  m.specs.clear();
  const int scale_bytes = static_cast<int>(dtype_size(dtype));
  std::vector<std::vector<float>> wq;  // the variants run through the network
  std::vector<double> err2;            // per spec of m.specs: sum (W_q - W)^2
  std::vector<size_t> run_index;       // per spec: its variant, or SIZE_MAX when scaled
  for (const QuantSpec& s : specs) {
    if (cols % s.group_size != 0) continue;
    TQ_TRY(std::vector<float> q, rtn_roundtrip(w, rows, cols, s, dtype));
    double e = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      const double dv = static_cast<double>(q[i]) - static_cast<double>(w[i]);
      e += dv * dv;
    }
    err2.push_back(e);
    m.specs.push_back({s, 0.0, quantized_module_bytes(m.params, s, scale_bytes), 0});
    run_index.push_back(wq.size());
    wq.push_back(std::move(q));
  }
  // The anchor of each wide affine spec: the widest measured affine spec of its group.
  auto anchor_of = [&](size_t i) -> int64_t {
    const QuantSpec& s = m.specs[i].spec;
    if (scale_above_bits <= 0 || s.mode != QuantMode::kAffine || s.bits <= scale_above_bits)
      return -1;
    int64_t best = -1;
    for (size_t j = 0; j < m.specs.size(); ++j) {
      const QuantSpec& a = m.specs[j].spec;
      if (a.mode == QuantMode::kAffine && a.group_size == s.group_size &&
          a.bits <= scale_above_bits &&
          (best < 0 || a.bits > m.specs[static_cast<size_t>(best)].spec.bits))
        best = static_cast<int64_t>(j);
    }
    return best;
  };
  std::vector<int64_t> anchor(m.specs.size());
  std::vector<const float*> ptrs;
  std::vector<size_t> variant(m.specs.size(), SIZE_MAX);
  for (size_t i = 0; i < m.specs.size(); ++i) {
    anchor[i] = anchor_of(i);
    if (anchor[i] >= 0) continue;
    variant[i] = ptrs.size();
    ptrs.push_back(wq[run_index[i]].data());
  }
  if (!ptrs.empty()) {
    const std::vector<double> kl = mean_kls(m, ptrs);
    for (size_t i = 0; i < m.specs.size(); ++i)
      if (variant[i] != SIZE_MAX) m.specs[i].kl = kl[variant[i]];
  }
  for (size_t i = 0; i < m.specs.size(); ++i) {
    if (anchor[i] < 0) continue;
    const size_t a = static_cast<size_t>(anchor[i]);
    m.specs[i].kl = err2[a] > 0 ? m.specs[a].kl * err2[i] / err2[a] : 0.0;
    m.specs[i].scaled_from_bits = m.specs[a].spec.bits;
  }
  if (step)
    for (size_t i = 0; i < specs.size(); ++i) step();
  return ok_status();
}

}  // namespace tq
