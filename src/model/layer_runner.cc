// Piecewise reference forward (see layer_runner.h); the math mirrors model/forward.cc.
#include "model/layer_runner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/rope.h"

namespace tq {

namespace {

struct Layer {
  std::vector<float> norm_attn, q, k, v, o, q_b, k_b, v_b, o_b, q_norm, k_norm;
  std::vector<float> norm_mlp, gate, up, down, gate_b, up_b, down_b;
};

const float* or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

const float* pick(const std::vector<float>& own, TensorRole role, const WeightOverride* ov) {
  return ov && ov->role == role ? ov->w : own.data();
}

}  // namespace

struct LayerRunner::Impl {
  ModelConfig cfg;
  std::vector<double> inv_freq;
  std::vector<float> embed, norm_final, lm_head;
  std::vector<Layer> layers;

  std::vector<float>* slot(TensorRole role, int64_t layer) {
    using R = TensorRole;
    if (layer < 0) {
      if (role == R::kEmbed) return &embed;
      if (role == R::kNormFinal) return &norm_final;
      if (role == R::kLmHead) return &lm_head;
      return nullptr;
    }
    Layer& L = layers[static_cast<size_t>(layer)];
    switch (role) {
      case R::kNormAttn:
        return &L.norm_attn;
      case R::kAttnQ:
        return &L.q;
      case R::kAttnK:
        return &L.k;
      case R::kAttnV:
        return &L.v;
      case R::kAttnO:
        return &L.o;
      case R::kAttnQBias:
        return &L.q_b;
      case R::kAttnKBias:
        return &L.k_b;
      case R::kAttnVBias:
        return &L.v_b;
      case R::kAttnOBias:
        return &L.o_b;
      case R::kQNorm:
        return &L.q_norm;
      case R::kKNorm:
        return &L.k_norm;
      case R::kNormMlp:
        return &L.norm_mlp;
      case R::kMlpGate:
        return &L.gate;
      case R::kMlpUp:
        return &L.up;
      case R::kMlpDown:
        return &L.down;
      case R::kMlpGateBias:
        return &L.gate_b;
      case R::kMlpUpBias:
        return &L.up_b;
      case R::kMlpDownBias:
        return &L.down_b;
      default:
        return nullptr;
    }
  }
};

LayerRunner::LayerRunner() : impl_(std::make_unique<Impl>()) {}
LayerRunner::~LayerRunner() = default;
const ModelConfig& LayerRunner::config() const { return impl_->cfg; }

Result<std::unique_ptr<LayerRunner>> LayerRunner::load(
    const ModelSource& src, std::function<void(int64_t, int64_t)> progress) {
  if (!src.tensors) return err("{}: model has no tensor source", src.path);
  const ModelConfig& c = src.config;
  const int64_t dims[] = {c.hidden_size,         c.num_hidden_layers,   c.intermediate_size,
                          c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                          c.vocab_size};
  for (int64_t v : dims)
    if (v <= 0 || v > std::numeric_limits<int32_t>::max())
      return err("{}: model geometry out of range (a size is {})", src.path, v);
  if (c.num_attention_heads % c.num_key_value_heads != 0 || c.head_dim % 2 != 0)
    return err("{}: unsupported attention geometry", src.path);
  auto inv = rope_inv_freq(c);
  if (!inv.ok()) return err("{}: {}", src.path, inv.error().message);
  std::unique_ptr<LayerRunner> r(new LayerRunner());
  Impl& m = *r->impl_;
  m.cfg = c;
  m.inv_freq = std::move(inv).value();
  m.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  std::vector<TensorSpec> specs = expected_tensors(c);
  const int64_t total = static_cast<int64_t>(specs.size());
  for (int64_t i = 0; i < total; ++i) {
    const TensorSpec& s = specs[static_cast<size_t>(i)];
    std::vector<float>* dst = m.slot(s.kind->role, s.layer);
    if (dst == nullptr) continue;
    TQ_TRY(FloatTensor f, src.tensors->load_f32_compute(s.name));
    if (f.shape != s.shape || static_cast<int64_t>(f.data.size()) != shape_numel(s.shape))
      return err("{}: tensor '{}' has shape {}, the config implies {}", src.path, s.name,
                 shape_str(f.shape), shape_str(s.shape));
    *dst = std::move(f.data);
    if (progress) progress(i + 1, total);
  }
  return r;
}

std::span<const float> LayerRunner::weight(TensorRole role, int64_t layer) const {
  if (layer >= impl_->cfg.num_hidden_layers) return {};
  if (role == TensorRole::kLmHead && impl_->lm_head.empty()) return impl_->embed;
  const std::vector<float>* v = impl_->slot(role, layer);
  return v ? std::span<const float>(*v) : std::span<const float>();
}

void LayerRunner::embed(std::span<const int32_t> tokens, float* x, const WeightOverride* ov) const {
  const int64_t d = impl_->cfg.hidden_size;
  const float* e = pick(impl_->embed, TensorRole::kEmbed, ov);
  for (size_t i = 0; i < tokens.size(); ++i)
    std::copy_n(e + static_cast<int64_t>(tokens[i]) * d, d, x + static_cast<int64_t>(i) * d);
}

void LayerRunner::attention_half(int64_t l, float* x, int64_t n, const WeightOverride* ov,
                                 int64_t seqs) const {
  const ModelConfig& c = impl_->cfg;
  const Layer& L = impl_->layers[static_cast<size_t>(l)];
  const int64_t d = c.hidden_size, hd = c.head_dim, half = hd / 2;
  const int64_t n_heads = c.num_attention_heads, n_kv = c.num_key_value_heads;
  const int64_t qd = n_heads * hd, kvd = n_kv * hd, rows = n * seqs;
  const float eps = static_cast<float>(c.rms_norm_eps);
  std::vector<float> h(static_cast<size_t>(rows * d)), q(static_cast<size_t>(rows * qd));
  std::vector<float> k(static_cast<size_t>(rows * kvd)), v(static_cast<size_t>(rows * kvd));
  std::vector<float> att(static_cast<size_t>(rows * qd));
  std::vector<float> cos(static_cast<size_t>(n * half)), sin(static_cast<size_t>(n * half));
  using R = TensorRole;
  rms_norm(x, L.norm_attn.data(), rows, d, eps, h.data());
  matmul_nt(h.data(), rows, d, pick(L.q, R::kAttnQ, ov), qd, or_null(L.q_b), q.data());
  matmul_nt(h.data(), rows, d, pick(L.k, R::kAttnK, ov), kvd, or_null(L.k_b), k.data());
  matmul_nt(h.data(), rows, d, pick(L.v, R::kAttnV, ov), kvd, or_null(L.v_b), v.data());
  if (!L.q_norm.empty()) {
    rms_norm(q.data(), L.q_norm.data(), rows * n_heads, hd, eps, q.data());
    rms_norm(k.data(), L.k_norm.data(), rows * n_kv, hd, eps, k.data());
  }
  for (int64_t i = 0; i < n; ++i)
    rope_angles(impl_->inv_freq.data(), half, i, cos.data() + i * half, sin.data() + i * half);
  for (int64_t r = 0; r < rows; ++r) {
    const float* cs = cos.data() + (r % n) * half;
    const float* sn = sin.data() + (r % n) * half;
    for (int64_t hh = 0; hh < n_heads; ++hh)
      rope_rotate(q.data() + r * qd + hh * hd, hd, cs, sn, c.rope_traditional);
    for (int64_t hh = 0; hh < n_kv; ++hh)
      rope_rotate(k.data() + r * kvd + hh * hd, hd, cs, sn, c.rope_traditional);
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  for (int64_t s = 0; s < seqs; ++s)
    causal_attention(q.data() + s * n * qd, k.data() + s * n * kvd, v.data() + s * n * kvd, n, 0,
                     n_heads, n_kv, hd, scale, att.data() + s * n * qd);
  matmul_nt(att.data(), rows, qd, pick(L.o, R::kAttnO, ov), d, or_null(L.o_b), h.data());
  for (int64_t i = 0; i < rows * d; ++i) x[i] += h[static_cast<size_t>(i)];
}

void LayerRunner::mlp_half(int64_t l, float* x, int64_t n, const WeightOverride* ov) const {
  const ModelConfig& c = impl_->cfg;
  const Layer& L = impl_->layers[static_cast<size_t>(l)];
  const int64_t d = c.hidden_size, inter = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  std::vector<float> h(static_cast<size_t>(n * d));
  std::vector<float> gate(static_cast<size_t>(n * inter)), up(static_cast<size_t>(n * inter));
  using R = TensorRole;
  rms_norm(x, L.norm_mlp.data(), n, d, eps, h.data());
  matmul_nt(h.data(), n, d, pick(L.gate, R::kMlpGate, ov), inter, or_null(L.gate_b), gate.data());
  matmul_nt(h.data(), n, d, pick(L.up, R::kMlpUp, ov), inter, or_null(L.up_b), up.data());
  silu_mul(gate.data(), up.data(), n * inter);
  matmul_nt(gate.data(), n, inter, pick(L.down, R::kMlpDown, ov), d, or_null(L.down_b),
            h.data());  // [n, d]
  for (int64_t i = 0; i < n * d; ++i) x[i] += h[static_cast<size_t>(i)];
}

void LayerRunner::head(const float* x, int64_t n, float* logits, const WeightOverride* ov) const {
  const ModelConfig& c = impl_->cfg;
  const int64_t d = c.hidden_size;
  std::vector<float> h(static_cast<size_t>(n * d));
  rms_norm(x, impl_->norm_final.data(), n, d, static_cast<float>(c.rms_norm_eps), h.data());
  const bool tied = impl_->lm_head.empty();
  const float* w = tied ? pick(impl_->embed, TensorRole::kEmbed, ov)
                        : pick(impl_->lm_head, TensorRole::kLmHead, ov);
  matmul_nt(h.data(), n, d, w, c.vocab_size, nullptr, logits);
}

}  // namespace tq
