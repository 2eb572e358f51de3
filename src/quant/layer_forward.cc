#include "quant/layer_forward.h"

#include <cmath>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/rope.h"
#include "model/tensor_table.h"

namespace tq {

namespace {

const float* or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

std::vector<float>* slot(LayerWeights& w, TensorRole role) {
  using R = TensorRole;
  switch (role) {
    case R::kNormAttn:
      return &w.norm_attn;
    case R::kAttnQ:
      return &w.q;
    case R::kAttnK:
      return &w.k;
    case R::kAttnV:
      return &w.v;
    case R::kAttnO:
      return &w.o;
    case R::kAttnQBias:
      return &w.q_b;
    case R::kAttnKBias:
      return &w.k_b;
    case R::kAttnVBias:
      return &w.v_b;
    case R::kAttnOBias:
      return &w.o_b;
    case R::kQNorm:
      return &w.q_norm;
    case R::kKNorm:
      return &w.k_norm;
    case R::kNormMlp:
      return &w.norm_mlp;
    case R::kMlpGate:
      return &w.gate;
    case R::kMlpUp:
      return &w.up;
    case R::kMlpDown:
      return &w.down;
    case R::kMlpGateBias:
      return &w.gate_b;
    case R::kMlpUpBias:
      return &w.up_b;
    case R::kMlpDownBias:
      return &w.down_b;
    default:
      return nullptr;
  }
}

}  // namespace

Result<LayerWeights> layer_weights_from(const std::map<std::string, FloatTensor>& tensors,
                                        const ModelConfig& cfg, int64_t layer) {
  LayerWeights w;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    if (s.layer != layer) continue;
    std::vector<float>* dst = slot(w, s.kind->role);
    if (dst == nullptr) continue;
    auto it = tensors.find(s.name);
    if (it == tensors.end()) return err("layer {}: tensor '{}' missing", layer, s.name);
    if (it->second.shape != s.shape ||
        static_cast<int64_t>(it->second.data.size()) != shape_numel(s.shape))
      return err("layer {}: tensor '{}' has shape {}, the config implies {}", layer, s.name,
                 shape_str(it->second.shape), shape_str(s.shape));
    *dst = it->second.data;
  }
  return w;
}

std::vector<float>* layer_matrix(LayerWeights& w, const ModelConfig& cfg, const std::string& name) {
  auto c = classify(name, cfg.family);
  if (!c || c->layer < 0) return nullptr;
  switch (c->kind->role) {
    case TensorRole::kAttnQ:
    case TensorRole::kAttnK:
    case TensorRole::kAttnV:
    case TensorRole::kAttnO:
    case TensorRole::kMlpGate:
    case TensorRole::kMlpUp:
    case TensorRole::kMlpDown:
      return slot(w, c->kind->role);
    default:
      return nullptr;
  }
}

Result<LayerRunner> LayerRunner::create(const ModelConfig& cfg, int64_t seq) {
  if (seq < 1) return err("layer forward: sequence length {} < 1", seq);
  if (cfg.head_dim % 2 != 0 || cfg.num_key_value_heads <= 0 ||
      cfg.num_attention_heads % cfg.num_key_value_heads != 0)
    return err("layer forward: unsupported head geometry");
  TQ_TRY(std::vector<double> inv_freq, rope_inv_freq(cfg));
  LayerRunner r;
  r.cfg_ = cfg;
  r.seq_ = seq;
  const int64_t half = cfg.head_dim / 2, kvd = cfg.num_key_value_heads * cfg.head_dim;
  r.cos_.resize(static_cast<size_t>(seq * half));
  r.sin_.resize(r.cos_.size());
  for (int64_t i = 0; i < seq; ++i)
    rope_angles(inv_freq.data(), half, i, r.cos_.data() + i * half, r.sin_.data() + i * half);
  r.k_.resize(static_cast<size_t>(seq * kvd));
  r.v_.resize(r.k_.size());
  r.up_.resize(static_cast<size_t>(seq * cfg.intermediate_size));
  return r;
}

void LayerRunner::attn_input(const LayerWeights& w, const float* x, float* h) const {
  rms_norm(x, w.norm_attn.data(), seq_, d(), static_cast<float>(cfg_.rms_norm_eps), h);
}

void LayerRunner::attention(const LayerWeights& w, const float* h, float* att) {
  const ModelConfig& c = cfg_;
  const int64_t n = seq_, dd = d(), hd = c.head_dim, half = hd / 2;
  const int64_t n_heads = c.num_attention_heads, n_kv = c.num_key_value_heads;
  const int64_t q_dim = n_heads * hd, kvd = n_kv * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  tmp_.resize(static_cast<size_t>(n * q_dim));
  float* q = tmp_.data();
  matmul_nt(h, n, dd, w.q.data(), q_dim, or_null(w.q_b), q);        // [n, qd]
  matmul_nt(h, n, dd, w.k.data(), kvd, or_null(w.k_b), k_.data());  // [n, kvd]
  matmul_nt(h, n, dd, w.v.data(), kvd, or_null(w.v_b), v_.data());  // [n, kvd]
  if (!w.q_norm.empty()) {  // qwen3: RMSNorm of every head vector before RoPE
    rms_norm(q, w.q_norm.data(), n * n_heads, hd, eps, q);
    rms_norm(k_.data(), w.k_norm.data(), n * n_kv, hd, eps, k_.data());
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* ci = cos_.data() + i * half;
    const float* si = sin_.data() + i * half;
    for (int64_t hh = 0; hh < n_heads; ++hh)
      rope_rotate(q + i * q_dim + hh * hd, hd, ci, si, c.rope_traditional);
    for (int64_t hh = 0; hh < n_kv; ++hh)
      rope_rotate(k_.data() + i * kvd + hh * hd, hd, ci, si, c.rope_traditional);
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  causal_attention(q, k_.data(), v_.data(), n, 0, n_heads, n_kv, hd, scale, att);
}

void LayerRunner::attn_residual(const LayerWeights& w, const float* x, const float* att,
                                float* x_mid) {
  const int64_t n = seq_ * d();
  h_.resize(static_cast<size_t>(n));
  matmul_nt(att, seq_, qd(), w.o.data(), d(), or_null(w.o_b), h_.data());  // [seq, d]
  for (int64_t i = 0; i < n; ++i) x_mid[i] = x[i] + h_[i];
}

void LayerRunner::mlp_input(const LayerWeights& w, const float* x_mid, float* h2) const {
  rms_norm(x_mid, w.norm_mlp.data(), seq_, d(), static_cast<float>(cfg_.rms_norm_eps), h2);
}

void LayerRunner::mlp_act(const LayerWeights& w, const float* h2, float* act) {
  matmul_nt(h2, seq_, d(), w.gate.data(), inter(), or_null(w.gate_b), act);     // [seq, inter]
  matmul_nt(h2, seq_, d(), w.up.data(), inter(), or_null(w.up_b), up_.data());  // [seq, inter]
  silu_mul(act, up_.data(), seq_ * inter());
}

void LayerRunner::mlp_residual(const LayerWeights& w, const float* x_mid, const float* act,
                               float* out) {
  const int64_t n = seq_ * d();
  h_.resize(static_cast<size_t>(n));
  matmul_nt(act, seq_, inter(), w.down.data(), d(), or_null(w.down_b), h_.data());  // [seq, d]
  for (int64_t i = 0; i < n; ++i) out[i] = x_mid[i] + h_[i];
}

void LayerRunner::full(const LayerWeights& w, const float* x, float* out) {
  const int64_t n = seq_ * d();
  std::vector<float> h(static_cast<size_t>(n)), xm(static_cast<size_t>(n));
  att_.resize(static_cast<size_t>(seq_ * qd()));
  act_.resize(static_cast<size_t>(seq_ * inter()));
  attn_input(w, x, h.data());
  attention(w, h.data(), att_.data());
  attn_residual(w, x, att_.data(), xm.data());
  mlp_input(w, xm.data(), h.data());
  mlp_act(w, h.data(), act_.data());
  mlp_residual(w, xm.data(), act_.data(), out);
}

}  // namespace tq
