// The reference forward pass: one readable loop over layers, every product through OpenBLAS.
// Matches mlx-lm's llama.py / qwen2.py / qwen3.py (FORMATS.md §7) computed in f32.
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/fast_forward.h"
#include "model/rope.h"
#include "model/tensor_table.h"

namespace tq {

namespace {

// One decoder layer's weights as f32; an absent bias or norm is an empty vector.
struct Layer {
  std::vector<float> norm_attn;       // [d]
  std::vector<float> q, k, v, o;      // [qd, d], [kvd, d], [kvd, d], [d, qd]
  std::vector<float> q_b, k_b, v_b;   // [qd], [kvd], [kvd]
  std::vector<float> o_b;             // [d]
  std::vector<float> q_norm, k_norm;  // [hd] (qwen3)
  std::vector<float> norm_mlp;        // [d]
  std::vector<float> gate, up, down;  // [inter, d], [inter, d], [d, inter]
  std::vector<float> gate_b, up_b;    // [inter]
  std::vector<float> down_b;          // [d]
};

const float* or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

void add_into(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// Sizes the runtime indexes with; open_model has already checked tensor shapes against them.
Status check_geometry(const ModelConfig& c) {
  const int64_t dims[] = {c.hidden_size,         c.num_hidden_layers,   c.intermediate_size,
                          c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                          c.vocab_size};
  for (int64_t v : dims)
    if (v <= 0 || v > std::numeric_limits<int32_t>::max())
      return err("config: model geometry out of range (a size is {})", v);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return err("config: num_attention_heads {} is not a multiple of num_key_value_heads {}",
               c.num_attention_heads, c.num_key_value_heads);
  if (c.head_dim % 2 != 0) return err("config: head_dim {} is odd", c.head_dim);
  if (c.num_attention_heads * c.head_dim > std::numeric_limits<int32_t>::max())
    return err("config: num_attention_heads * head_dim too large");
  return ok_status();
}

}  // namespace

struct Transformer::Impl {
  ModelConfig cfg;
  std::vector<double> inv_freq;   // [head_dim / 2]
  std::vector<float> embed;       // [vocab, d]
  std::vector<float> norm_final;  // [d]
  std::vector<float> lm_head;     // [vocab, d]; empty when tied to the embedding
  std::vector<Layer> layers;
  std::unique_ptr<FastModel> fast;  // set when the fast runtime runs this model

  const std::vector<float>& head() const { return lm_head.empty() ? embed : lm_head; }

  // Where the tensor of `role` (at `layer`, -1 for globals) lives; nullptr for ignored roles.
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

Transformer::Transformer() : impl_(std::make_unique<Impl>()) {}
Transformer::~Transformer() = default;

const ModelConfig& Transformer::config() const { return impl_->cfg; }

Result<std::unique_ptr<Transformer>> Transformer::load(
    const ModelSource& src, std::function<void(int64_t, int64_t)> progress) {
  if (!src.tensors) return err("{}: model has no tensor source", src.path);
  const ModelConfig& cfg = src.config;
  if (Status st = check_geometry(cfg); !st.ok()) return err("{}: {}", src.path, st.error().message);
  auto inv = rope_inv_freq(cfg);
  if (!inv.ok()) return err("{}: {}", src.path, inv.error().message);

  std::unique_ptr<Transformer> t(new Transformer());
  Impl& m = *t->impl_;
  m.cfg = cfg;
  m.inv_freq = std::move(inv).value();
  m.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  std::vector<TensorSpec> specs = expected_tensors(cfg);
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
  return t;
}

Result<std::unique_ptr<Transformer>> Transformer::load(
    const ModelSource& src, const RuntimeOptions& opts,
    std::function<void(int64_t, int64_t)> progress) {
  if (opts.reference) return load(src, std::move(progress));
  if (!src.tensors) return err("{}: model has no tensor source", src.path);
  if (Status st = check_geometry(src.config); !st.ok())
    return err("{}: {}", src.path, st.error().message);
  auto inv = rope_inv_freq(src.config);
  if (!inv.ok()) return err("{}: {}", src.path, inv.error().message);
  std::unique_ptr<Transformer> t(new Transformer());
  t->impl_->cfg = src.config;
  TQ_TRY(t->impl_->fast, FastModel::load(src, opts, std::move(inv).value(), std::move(progress)));
  return t;
}

std::string Transformer::runtime_name() const {
  if (impl_->fast) return impl_->fast->name();
  return "reference (" + blas_backend() + ")";
}

int Transformer::threads() const {
  return impl_->fast ? impl_->fast->threads() : ThreadPool::hardware_threads();
}

uint64_t Transformer::bytes_per_token() const {
  if (impl_->fast) return impl_->fast->bytes_per_token();
  const Impl& m = *impl_;
  uint64_t b = (m.head().size() + static_cast<uint64_t>(m.cfg.hidden_size)) * sizeof(float);
  for (const Layer& L : m.layers)
    b += (L.q.size() + L.k.size() + L.v.size() + L.o.size() + L.gate.size() + L.up.size() +
          L.down.size()) *
         sizeof(float);
  return b;
}

KvCache Transformer::new_cache(int64_t capacity) const {
  if (impl_->fast) return impl_->fast->new_cache(capacity);
  const ModelConfig& c = impl_->cfg;
  KvCache kv;
  kv.capacity = std::max<int64_t>(capacity, 0);
  size_t size =
      static_cast<size_t>(c.num_hidden_layers * kv.capacity * c.num_key_value_heads * c.head_dim);
  kv.k.assign(size, 0.0f);
  kv.v.assign(size, 0.0f);
  return kv;
}

Status Transformer::forward(std::span<const int32_t> tokens, KvCache& cache,
                            std::span<float> logits, bool all_logits) const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.cfg;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t d = c.hidden_size, hd = c.head_dim, half = hd / 2;
  const int64_t n_heads = c.num_attention_heads, n_kv = c.num_key_value_heads;
  const int64_t qd = n_heads * hd, kvd = n_kv * hd, inter = c.intermediate_size;
  const int64_t vocab = c.vocab_size, cap = cache.capacity, p0 = cache.n;
  const float eps = static_cast<float>(c.rms_norm_eps);

  if (n == 0) return err("forward: no tokens");
  const size_t cache_size = static_cast<size_t>(c.num_hidden_layers * cap * kvd);
  const bool fits = m.fast ? m.fast->fits(cache)
                           : cache.layout == KvLayout::kRows && cache.k.size() == cache_size &&
                                 cache.v.size() == cache_size;
  if (cap < 0 || !fits)
    return err("forward: KV cache does not fit this model and runtime (make it with new_cache)");
  if (p0 < 0 || n > cap - p0)
    return err("forward: {} cached + {} new positions exceed the KV cache capacity {}", p0, n, cap);
  const int64_t out_rows = all_logits ? n : 1;
  if (static_cast<int64_t>(logits.size()) < out_rows * vocab)
    return err("forward: logits buffer holds {} floats, {} rows x vocab {} needed", logits.size(),
               out_rows, vocab);
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return err("forward: token id {} at index {} outside the vocabulary [0, {})", tokens[i], i,
                 vocab);
  if (m.fast) return m.fast->forward(tokens, cache, logits, all_logits);

  std::vector<float> x(static_cast<size_t>(n * d));  // [n, d] residual stream
  std::vector<float> h(static_cast<size_t>(n * d));  // [n, d] normed input / branch output
  std::vector<float> q(static_cast<size_t>(n * qd)), att(static_cast<size_t>(n * qd));
  std::vector<float> gate(static_cast<size_t>(n * inter)), up(static_cast<size_t>(n * inter));
  std::vector<float> cos(static_cast<size_t>(n * half)), sin(static_cast<size_t>(n * half));
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(m.embed.data() + tokens[i] * d, d, x.data() + i * d);
    rope_angles(m.inv_freq.data(), half, p0 + i, cos.data() + i * half, sin.data() + i * half);
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& L = m.layers[static_cast<size_t>(l)];
    // This layer's keys/values [cap, kvd]; the new rows go straight into the cache.
    float* kc = cache.k.data() + l * cap * kvd;
    float* vc = cache.v.data() + l * cap * kvd;
    float* k_new = kc + p0 * kvd;
    float* v_new = vc + p0 * kvd;

    rms_norm(x.data(), L.norm_attn.data(), n, d, eps, h.data());
    matmul_nt(h.data(), n, d, L.q.data(), qd, or_null(L.q_b), q.data());  // [n, qd]
    matmul_nt(h.data(), n, d, L.k.data(), kvd, or_null(L.k_b), k_new);    // [n, kvd]
    matmul_nt(h.data(), n, d, L.v.data(), kvd, or_null(L.v_b), v_new);    // [n, kvd]
    if (!L.q_norm.empty()) {  // qwen3: RMSNorm of every head vector before RoPE
      rms_norm(q.data(), L.q_norm.data(), n * n_heads, hd, eps, q.data());
      rms_norm(k_new, L.k_norm.data(), n * n_kv, hd, eps, k_new);
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* ci = cos.data() + i * half;
      const float* si = sin.data() + i * half;
      for (int64_t hh = 0; hh < n_heads; ++hh)
        rope_rotate(q.data() + i * qd + hh * hd, hd, ci, si, c.rope_traditional);
      for (int64_t hh = 0; hh < n_kv; ++hh)
        rope_rotate(k_new + i * kvd + hh * hd, hd, ci, si, c.rope_traditional);
    }
    causal_attention(q.data(), kc, vc, n, p0, n_heads, n_kv, hd, scale, att.data());
    matmul_nt(att.data(), n, qd, L.o.data(), d, or_null(L.o_b), h.data());  // [n, d]
    add_into(x.data(), h.data(), n * d);

    rms_norm(x.data(), L.norm_mlp.data(), n, d, eps, h.data());
    matmul_nt(h.data(), n, d, L.gate.data(), inter, or_null(L.gate_b), gate.data());  // [n, inter]
    matmul_nt(h.data(), n, d, L.up.data(), inter, or_null(L.up_b), up.data());        // [n, inter]
    silu_mul(gate.data(), up.data(), n * inter);
    matmul_nt(gate.data(), n, inter, L.down.data(), d, or_null(L.down_b), h.data());  // [n, d]
    add_into(x.data(), h.data(), n * d);
  }
  cache.n = p0 + n;

  // logits[out_rows, vocab] = norm(x[last out_rows]) · head^T
  const float* xs = x.data() + (n - out_rows) * d;
  rms_norm(xs, m.norm_final.data(), out_rows, d, eps, h.data());
  matmul_nt(h.data(), out_rows, d, m.head().data(), vocab, nullptr, logits.data());
  return ok_status();
}

}  // namespace tq
