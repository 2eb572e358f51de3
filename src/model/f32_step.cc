#include "model/f32_step.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/gated_delta.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/rope.h"

namespace tq {

namespace {

float* sized(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

void add_into(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

GatedDeltaDims delta_dims(const ModelConfig& c) {
  return {c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
          c.linear_value_head_dim};
}

}  // namespace

F32Io F32Buffers::bind(const ModelConfig& c, const std::vector<double>& inv_freq, float* x,
                       int64_t n, int64_t seqs, int64_t p0, float* k, float* v) {
  const int64_t rows = n * seqs, d = c.hidden_size, half = c.rotary_dims() / 2;
  const int64_t qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
  F32Io io;
  io.n = n, io.seqs = seqs, io.p0 = p0, io.x = x;
  io.h = sized(h_, rows * d);
  io.q = sized(q_, rows * qd);
  io.att = sized(att_, rows * std::max(qd, c.linear_value_dim()));
  if (c.family == Family::kQwen35) {
    const GatedDeltaDims dd = delta_dims(c);
    io.att_gate = sized(att_gate_, rows * qd);
    io.qg = sized(qg_, rows * 2 * qd);
    io.lin_qkv = sized(lin_qkv_, rows * dd.conv_dim());
    io.lin_z = sized(lin_z_, rows * dd.value_dim());
    io.lin_b = sized(lin_b_, rows * dd.hv);
    io.lin_a = sized(lin_a_, rows * dd.hv);
    // States of their own for calls without a cache (they start at zero: p0 == 0).
    io.conv_state = sized(conv_state_, seqs * (c.linear_conv_kernel_dim - 1) * dd.conv_dim());
    io.ssm_state = sized(ssm_state_, seqs * dd.state_size());
  }
  io.k = k != nullptr ? k : sized(k_, rows * kvd);
  io.v = v != nullptr ? v : sized(v_, rows * kvd);
  io.gate = sized(gate_, rows * c.intermediate_size);
  io.up = sized(up_, rows * c.intermediate_size);
  float* cs = sized(cos_, n * half);
  float* sn = sized(sin_, n * half);
  rope_table(inv_freq, p0, n, cs, sn);
  io.cos = cs, io.sin = sn;
  return io;
}

F32Io F32Buffers::bind_mlp(const ModelConfig& c, float* x, int64_t rows) {
  F32Io io;
  io.n = rows, io.x = x;
  io.h = sized(h_, rows * c.hidden_size);
  io.gate = sized(gate_, rows * c.intermediate_size);
  io.up = sized(up_, rows * c.intermediate_size);
  return io;
}

void F32Step::linear(TensorRole role, const std::vector<float>& w, const std::vector<float>& bias,
                     const float* x, int64_t in, int64_t out, float* y, const F32Io& io) const {
  if (io.tap != nullptr) (*io.tap)(role, x, io.rows(), in);
  const float* wp = io.weight != nullptr && io.weight->role == role ? io.weight->w : w.data();
  matmul_nt(x, io.rows(), in, wp, out, bias.empty() ? nullptr : bias.data(), y);
}

void F32Step::attn_norm(const F32Layer& L, F32Io& io) const {
  rms_norm(io.x, L.norm_attn.data(), io.rows(), c_.hidden_size, static_cast<float>(c_.rms_norm_eps),
           io.h);
}

void F32Step::qkv(const F32Layer& L, F32Io& io) const {
  if (L.linear) return lin_in(L, io);
  const int64_t d = c_.hidden_size, hd = c_.head_dim, rows = io.rows();
  const int64_t n_heads = c_.num_attention_heads, n_kv = c_.num_key_value_heads;
  const int64_t qd = n_heads * hd, kvd = n_kv * hd;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  // The new keys and values are contiguous rows: after the prefix when one sequence extends a
  // cache (p0 > 0), the whole buffer when several start at 0.
  float* k = io.k + io.p0 * kvd;
  float* v = io.v + io.p0 * kvd;
  using R = TensorRole;
  if (c_.attn_output_gate()) {  // q_proj rows per head: [hd query | hd gate]
    linear(R::kAttnQ, L.q, L.q_b, io.h, d, 2 * qd, io.qg, io);
    for (int64_t r = 0; r < rows * n_heads; ++r) {
      std::copy_n(io.qg + 2 * r * hd, hd, io.q + r * hd);
      std::copy_n(io.qg + (2 * r + 1) * hd, hd, io.att_gate + r * hd);
    }
  } else {
    linear(R::kAttnQ, L.q, L.q_b, io.h, d, qd, io.q, io);
  }
  linear(R::kAttnK, L.k, L.k_b, io.h, d, kvd, k, io);
  linear(R::kAttnV, L.v, L.v_b, io.h, d, kvd, v, io);
  if (!L.q_norm.empty()) {  // qwen3: RMSNorm of every head vector before RoPE
    rms_norm(io.q, L.q_norm.data(), rows * n_heads, hd, eps, io.q);
    rms_norm(k, L.k_norm.data(), rows * n_kv, hd, eps, k);
  }
  rope_rows(c_, io.cos, io.sin, io.n, 0, rows, io.q, k);
}

void F32Step::attn_core(const F32Layer& L, F32Io& io) const {
  if (L.linear) return lin_core(L, io);
  const int64_t hd = c_.head_dim, n_heads = c_.num_attention_heads, n_kv = c_.num_key_value_heads,
                qd = n_heads * hd, kvd = n_kv * hd;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t kv_rows = io.p0 + io.n;
  for (int64_t s = 0; s < io.seqs; ++s)
    causal_attention(io.q + s * io.n * qd, io.k + s * kv_rows * kvd, io.v + s * kv_rows * kvd, io.n,
                     io.p0, n_heads, n_kv, hd, scale, io.att + s * io.n * qd);
}

void F32Step::attn_out(const F32Layer& L, F32Io& io) const {
  if (L.linear) return lin_out(L, io);
  const int64_t d = c_.hidden_size, qd = c_.num_attention_heads * c_.head_dim;
  if (c_.attn_output_gate())
    for (int64_t i = 0; i < io.rows() * qd; ++i)
      io.att[i] *= 1.0f / (1.0f + std::exp(-io.att_gate[i]));
  linear(TensorRole::kAttnO, L.o, L.o_b, io.att, qd, d, io.h, io);
  add_into(io.x, io.h, io.rows() * d);
}

void F32Step::lin_in(const F32Layer& L, F32Io& io) const {
  const GatedDeltaDims dd = delta_dims(c_);
  const int64_t d = c_.hidden_size;
  using R = TensorRole;
  const std::vector<float> none;
  linear(R::kLinQkv, L.lin_qkv, none, io.h, d, dd.conv_dim(), io.lin_qkv, io);
  linear(R::kLinZ, L.lin_z, none, io.h, d, dd.value_dim(), io.lin_z, io);
  linear(R::kLinB, L.lin_b, none, io.h, d, dd.hv, io.lin_b, io);
  linear(R::kLinA, L.lin_a, none, io.h, d, dd.hv, io.lin_a, io);
}

void F32Step::lin_core(const F32Layer& L, F32Io& io) const {
  const GatedDeltaDims dd = delta_dims(c_);
  const int64_t K = c_.linear_conv_kernel_dim, C = dd.conv_dim(), n = io.n;
  for (int64_t s = 0; s < io.seqs; ++s) {
    float* conv_state = io.conv_state + s * (K - 1) * C;
    float* state = io.ssm_state + s * dd.state_size();
    if (io.p0 == 0) {  // a new sequence: both states start at zero
      std::fill_n(conv_state, (K - 1) * C, 0.0f);
      std::fill_n(state, dd.state_size(), 0.0f);
    }
    float* qkv = io.lin_qkv + s * n * C;
    causal_conv1d_silu(L.lin_conv.data(), C, K, conv_state, qkv, n);
    gated_delta_rule(dd, qkv, io.lin_b + s * n * dd.hv, io.lin_a + s * n * dd.hv,
                     L.lin_a_log.data(), L.lin_dt_bias.data(), state, n,
                     io.att + s * n * dd.value_dim(), n >= delta_chunk_min_ ? delta_chunk_ : 0);
  }
}

void F32Step::lin_out(const F32Layer& L, F32Io& io) const {
  const GatedDeltaDims dd = delta_dims(c_);
  gated_rms_norm(io.att, io.lin_z, L.lin_norm.data(), io.rows() * dd.hv, dd.dv,
                 static_cast<float>(c_.rms_norm_eps));
  linear(TensorRole::kLinOut, L.lin_out, {}, io.att, dd.value_dim(), c_.hidden_size, io.h, io);
  add_into(io.x, io.h, io.rows() * c_.hidden_size);
}

void F32Step::mlp_norm(const F32Layer& L, F32Io& io) const {
  rms_norm(io.x, L.norm_mlp.data(), io.rows(), c_.hidden_size, static_cast<float>(c_.rms_norm_eps),
           io.h);
}

void F32Step::mlp_act(const F32Layer& L, F32Io& io) const {
  const int64_t d = c_.hidden_size, inter = c_.intermediate_size;
  linear(TensorRole::kMlpGate, L.gate, L.gate_b, io.h, d, inter, io.gate, io);
  linear(TensorRole::kMlpUp, L.up, L.up_b, io.h, d, inter, io.up, io);
  silu_mul(io.gate, io.up, io.rows() * inter);
}

void F32Step::mlp_out(const F32Layer& L, F32Io& io) const {
  const int64_t d = c_.hidden_size, inter = c_.intermediate_size;
  linear(TensorRole::kMlpDown, L.down, L.down_b, io.gate, inter, d, io.h, io);
  add_into(io.x, io.h, io.rows() * d);
}

}  // namespace tq
