#include "recipe/sensitivity_measure.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "formats/mlx_encode.h"
#include "formats/mlx_quant.h"

namespace tq {

namespace {

bool is_attention(TensorRole r) {
  return r == TensorRole::kAttnQ || r == TensorRole::kAttnK || r == TensorRole::kAttnV ||
         r == TensorRole::kAttnO;
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

// sum_i exp(x_i - m) with m = max x, accumulated in f64.
double log_sum_exp(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  return static_cast<double>(m) + std::log(s);
}

}  // namespace

std::vector<ModuleSensitivity> quantizable_modules(const ModelConfig& cfg, DType dtype) {
  std::vector<ModuleSensitivity> out;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    if (!s.kind->quantizable || s.shape.size() != 2) continue;
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

Result<SensitivityMeter> SensitivityMeter::prepare(const LayerRunner& runner,
                                                   const CalibWindows& w) {
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
  std::vector<float> x(static_cast<size_t>(n * d)), logits(static_cast<size_t>(n * V));
  for (int64_t k = 0; k < w.count; ++k) {
    runner.embed({w.tokens.data() + k * n, static_cast<size_t>(n)}, x.data());
    for (size_t l = 0; l < L; ++l) {
      s.x_in_[l][k] = x;
      runner.attention_half(static_cast<int64_t>(l), x.data(), n);
      s.x_mid_[l][k] = x;
      runner.mlp_half(static_cast<int64_t>(l), x.data(), n);
    }
    s.x_in_[L][k] = x;
    runner.head(x.data(), n, logits.data());
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

double SensitivityMeter::mean_kl(const ModuleSensitivity& m,
                                 std::span<const float> w_module) const {
  const LayerRunner& r = *runner_;
  const ModelConfig& c = r.config();
  const int64_t n = w_->seq_len, V = c.vocab_size, L = c.num_hidden_layers;
  const int64_t scored = n - w_->first_target;
  const WeightOverride ov{m.role, w_module.data()};
  std::vector<float> x, logits(static_cast<size_t>(n * V));
  double total = 0;
  for (int64_t k = 0; k < w_->count; ++k) {
    const size_t kk = static_cast<size_t>(k);
    int64_t next_layer = 0;
    const WeightOverride* head_ov = nullptr;
    if (m.role == TensorRole::kEmbed) {
      x.resize(static_cast<size_t>(n * c.hidden_size));
      r.embed({w_->tokens.data() + k * n, static_cast<size_t>(n)}, x.data(), &ov);
      if (c.tie_word_embeddings) head_ov = &ov;
    } else if (m.role == TensorRole::kLmHead) {
      x = x_in_[static_cast<size_t>(L)][kk];
      next_layer = L;
      head_ov = &ov;
    } else if (is_attention(m.role)) {
      x = x_in_[static_cast<size_t>(m.layer)][kk];
      r.layer(m.layer, x.data(), n, &ov);
      next_layer = m.layer + 1;
    } else {
      x = x_mid_[static_cast<size_t>(m.layer)][kk];
      r.mlp_half(m.layer, x.data(), n, &ov);
      next_layer = m.layer + 1;
    }
    for (int64_t l = next_layer; l < L; ++l) r.layer(l, x.data(), n);
    r.head(x.data(), n, logits.data(), head_ov);
    // KL(p || q) = sum p log p - sum p x_q + logsumexp(x_q).
    for (int64_t j = 0; j < scored; ++j) {
      const float* row = logits.data() + (w_->first_target - 1 + j) * V;
      const float* p = p_ref_[kk].data() + j * V;
      double dot = 0;
      for (int64_t i = 0; i < V; ++i) dot += static_cast<double>(p[i]) * row[i];
      total += neg_entropy_[kk][static_cast<size_t>(j)] - dot + log_sum_exp(row, V);
    }
  }
  return total / static_cast<double>(w_->count * scored);
}

Status SensitivityMeter::measure(ModuleSensitivity& m, std::span<const QuantSpec> specs,
                                 DType dtype, const std::function<void()>& step) const {
  const int64_t layer =
      m.role == TensorRole::kEmbed || m.role == TensorRole::kLmHead ? -1 : m.layer;
  std::span<const float> w = runner_->weight(m.role, layer);
  const int64_t rows = m.shape[0], cols = m.shape[1];
  if (static_cast<int64_t>(w.size()) != rows * cols)
    return err("sensitivity: module {} has no weight of shape [{}, {}]", m.name, rows, cols);
  m.specs.clear();
  const int scale_bytes = static_cast<int>(dtype_size(dtype));
  for (const QuantSpec& s : specs) {
    if (cols % s.group_size == 0) {
      TQ_TRY(std::vector<float> wq, rtn_roundtrip(w, rows, cols, s, dtype));
      m.specs.push_back({s, mean_kl(m, wq), quantized_module_bytes(m.params, s, scale_bytes)});
    }
    if (step) step();
  }
  return ok_status();
}

}  // namespace tq
