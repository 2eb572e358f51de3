#include "model/f32_step.h"

#include <cmath>

#include "kernels/attention.h"
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

}  // namespace

F32Io F32Buffers::bind(const ModelConfig& c, const std::vector<double>& inv_freq, float* x,
                       int64_t n, int64_t seqs, int64_t p0, float* k, float* v) {
  const int64_t rows = n * seqs, d = c.hidden_size, half = c.head_dim / 2;
  const int64_t qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
  F32Io io;
  io.n = n, io.seqs = seqs, io.p0 = p0, io.x = x;
  io.h = sized(h_, rows * d);
  io.q = sized(q_, rows * qd);
  io.att = sized(att_, rows * qd);
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
  const int64_t d = c_.hidden_size, hd = c_.head_dim, rows = io.rows();
  const int64_t n_heads = c_.num_attention_heads, n_kv = c_.num_key_value_heads;
  const int64_t qd = n_heads * hd, kvd = n_kv * hd;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  // The new keys and values are contiguous rows: after the prefix when one sequence extends a
  // cache (p0 > 0), the whole buffer when several start at 0.
  float* k = io.k + io.p0 * kvd;
  float* v = io.v + io.p0 * kvd;
  using R = TensorRole;
  linear(R::kAttnQ, L.q, L.q_b, io.h, d, qd, io.q, io);
  linear(R::kAttnK, L.k, L.k_b, io.h, d, kvd, k, io);
  linear(R::kAttnV, L.v, L.v_b, io.h, d, kvd, v, io);
  if (!L.q_norm.empty()) {  // qwen3: RMSNorm of every head vector before RoPE
    rms_norm(io.q, L.q_norm.data(), rows * n_heads, hd, eps, io.q);
    rms_norm(k, L.k_norm.data(), rows * n_kv, hd, eps, k);
  }
  rope_rows(c_, io.cos, io.sin, io.n, 0, rows, io.q, k);
}

void F32Step::attn_core(const F32Layer&, F32Io& io) const {
  const int64_t hd = c_.head_dim, n_heads = c_.num_attention_heads, n_kv = c_.num_key_value_heads,
                qd = n_heads * hd, kvd = n_kv * hd;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t kv_rows = io.p0 + io.n;
  for (int64_t s = 0; s < io.seqs; ++s)
    causal_attention(io.q + s * io.n * qd, io.k + s * kv_rows * kvd, io.v + s * kv_rows * kvd, io.n,
                     io.p0, n_heads, n_kv, hd, scale, io.att + s * io.n * qd);
}

void F32Step::attn_out(const F32Layer& L, F32Io& io) const {
  const int64_t d = c_.hidden_size, qd = c_.num_attention_heads * c_.head_dim;
  linear(TensorRole::kAttnO, L.o, L.o_b, io.att, qd, d, io.h, io);
  add_into(io.x, io.h, io.rows() * d);
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
