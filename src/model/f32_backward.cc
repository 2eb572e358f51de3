#include "model/f32_backward.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/vec_ops.h"
#include "model/rope.h"

namespace tq {

namespace {

using R = TensorRole;

// v <- p[0, n), in v's own storage when it is large enough.
void keep(std::vector<float>& v, const float* p, int64_t n) { v.assign(p, p + n); }

// dx += d rms_norm(x)·w / dx applied to dy, rows [r0, r1); dw (when not null) += d/dw.
void rms_norm_backward(const float* x, const float* w, int64_t r0, int64_t r1, int64_t d, float eps,
                       const float* dy, float* dx, float* dw) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * d;
    const float* gr = dy + r * d;
    double ss = 0.0, dot = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      ss += static_cast<double>(xr[i]) * xr[i];
      dot += static_cast<double>(gr[i]) * w[i] * xr[i];
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    const double c = dot * inv * inv * inv / static_cast<double>(d);
    float* o = dx + r * d;
    for (int64_t i = 0; i < d; ++i) o[i] += static_cast<float>(inv * gr[i] * w[i] - c * xr[i]);
    if (dw != nullptr)
      for (int64_t i = 0; i < d; ++i) dw[i] += static_cast<float>(inv * gr[i] * xr[i]);
  }
}

// dW [out, in] = dy^T [out, rows] · x [rows, in], handed to grad() when wanted.
void weight_grad(const WantsGrad& wants, const MatrixGrad& grad, R role, int64_t layer,
                 const float* dy, const float* x, int64_t rows, int64_t in, int64_t out,
                 std::vector<float>& scratch) {
  if (!wants(role, layer)) return;
  scratch.resize(static_cast<size_t>(out * in));
  gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 0.0f, scratch.data(), in);
  grad(role, layer, scratch.data(), out, in);
}

}  // namespace

void F32Backprop::parallel(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                           int per_thread) const {
  if (pool_ == nullptr || pool_->size() == 1) return fn(0, n);
  pool_->parallel_for(n, fn, 1, per_thread);
}

// The weight's gradient goes to grad() as [1, d]: each slice sums its rows' share, then adds
// it under a lock.
void F32Backprop::norm_backward(const WantsGrad& wants, const MatrixGrad& grad, TensorRole role,
                                int64_t layer, const float* x, const float* w, int64_t rows,
                                int64_t d, const float* dy, float* dx) const {
  const float eps = static_cast<float>(c_.rms_norm_eps);
  if (!wants(role, layer)) {
    parallel(rows, [&](int64_t r0, int64_t r1) {
      rms_norm_backward(x, w, r0, r1, d, eps, dy, dx, nullptr);
    });
    return;
  }
  std::vector<float> dw(static_cast<size_t>(d), 0.0f);
  std::mutex mu;
  parallel(rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> part(static_cast<size_t>(d), 0.0f);
    rms_norm_backward(x, w, r0, r1, d, eps, dy, dx, part.data());
    const std::lock_guard<std::mutex> lock(mu);
    for (int64_t i = 0; i < d; ++i) dw[i] += part[i];
  });
  grad(role, layer, dw.data(), 1, d);
}

Status F32Backprop::supports(const ModelConfig& c) {
  if (c.family == Family::kQwen35)
    return err(
        "distillation's backward covers llama, qwen2 and qwen3 layers, not {} (Gated "
        "DeltaNet and gated attention)",
        family_name(c.family));
  return ok_status();
}

void F32Backprop::forward(const F32Tensors& t, std::span<const int32_t> tokens, int64_t n,
                          int64_t seqs, float* logits) {
  const int64_t d = c_.hidden_size, rows = n * seqs, inter = c_.intermediate_size;
  const int64_t qd = c_.num_attention_heads * c_.head_dim;
  const int64_t kvd = c_.num_key_value_heads * c_.head_dim;
  n_ = n, seqs_ = seqs;
  tokens_.assign(tokens.begin(), tokens.end());
  std::vector<float> x(static_cast<size_t>(rows * d));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(t.embed.data() + static_cast<int64_t>(tokens_[r]) * d, d, x.data() + r * d);
  saved_.resize(t.layers.size());
  F32Io io = buf_.bind(c_, inv_freq_, x.data(), n, seqs, 0);
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const F32Layer& L = t.layers[l];
    Saved& s = saved_[l];
    s.x = x;
    step_.attn_norm(L, io);
    keep(s.h1, io.h, rows * d);
    step_.qkv(L, io);
    keep(s.q, io.q, rows * qd);
    keep(s.k, io.k, rows * kvd);
    keep(s.v, io.v, rows * kvd);
    step_.attn_core(L, io);
    keep(s.att, io.att, rows * qd);
    step_.attn_out(L, io);
    s.x1 = x;
    step_.mlp_norm(L, io);
    keep(s.h2, io.h, rows * d);
    step_.mlp_act(L, io);
    keep(s.up, io.up, rows * inter);
    keep(s.act, io.gate, rows * inter);
    step_.mlp_out(L, io);
  }
  xf_ = x;
  hf_.resize(x.size());
  rms_norm(x.data(), t.norm_final.data(), rows, d, static_cast<float>(c_.rms_norm_eps), hf_.data());
  matmul_nt(hf_.data(), rows, d, t.head().data(), c_.vocab_size, nullptr, logits);
}

void F32Backprop::backward(const F32Tensors& t, const float* dlogits, const WantsGrad& wants,
                           const MatrixGrad& grad) {
  const int64_t d = c_.hidden_size, rows = n_ * seqs_, vocab = c_.vocab_size;
  dh_.resize(static_cast<size_t>(rows * d));
  dx_.assign(static_cast<size_t>(rows * d), 0.0f);
  gemm(false, false, rows, d, vocab, 1.0f, dlogits, vocab, t.head().data(), d, 0.0f, dh_.data(), d);
  const R head_role = t.tied ? R::kEmbed : R::kLmHead;
  bool table = false;  // dtable_ [vocab, d] holds the tied head's gradient
  if (wants(head_role, -1)) {
    dtable_.resize(static_cast<size_t>(vocab * d));
    gemm(true, false, vocab, d, rows, 1.0f, dlogits, vocab, hf_.data(), d, 0.0f, dtable_.data(), d);
    if (t.tied)
      table = true;
    else
      grad(R::kLmHead, -1, dtable_.data(), vocab, d);
  }
  norm_backward(wants, grad, R::kNormFinal, -1, xf_.data(), t.norm_final.data(), rows, d,
                dh_.data(), dx_.data());
  // RoPE turns each pair by an angle; its transpose turns back.
  const int64_t half = c_.rotary_dims() / 2;
  cs_.resize(static_cast<size_t>(n_ * half));
  sn_.resize(static_cast<size_t>(n_ * half));
  rope_table(inv_freq_, 0, n_, cs_.data(), sn_.data());
  for (float& v : sn_) v = -v;
  for (int64_t l = static_cast<int64_t>(t.layers.size()) - 1; l >= 0; --l)
    layer_backward(t, l, dx_.data(), wants, grad);
  if (wants(R::kEmbed, -1)) {
    if (!table) dtable_.assign(static_cast<size_t>(vocab * d), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = dtable_.data() + static_cast<int64_t>(tokens_[r]) * d;
      for (int64_t i = 0; i < d; ++i) row[i] += dx_[r * d + i];
    }
    grad(R::kEmbed, -1, dtable_.data(), vocab, d);
  }
}

void F32Backprop::layer_backward(const F32Tensors& t, int64_t l, float* dx, const WantsGrad& wants,
                                 const MatrixGrad& grad) {
  const F32Layer& L = t.layers[static_cast<size_t>(l)];
  const Saved& s = saved_[static_cast<size_t>(l)];
  const int64_t d = c_.hidden_size, rows = n_ * seqs_, inter = c_.intermediate_size;
  const int64_t hd = c_.head_dim, qd = c_.num_attention_heads * hd;
  const int64_t kvd = c_.num_key_value_heads * hd;

  // MLP: x_out = x1 + (silu(h2·Wg^T) ⊙ h2·Wu^T)·Wd^T, h2 = rms_norm(x1).
  dact_.resize(static_cast<size_t>(rows * inter));
  g_.resize(static_cast<size_t>(rows * inter));
  float* dact = dact_.data();
  float* g = g_.data();
  gemm(false, false, rows, inter, d, 1.0f, dx, d, L.down.data(), inter, 0.0f, dact, inter);
  weight_grad(wants, grad, R::kMlpDown, l, dx, s.act.data(), rows, inter, d, scratch_);
  matmul_nt(s.h2.data(), rows, d, L.gate.data(), inter,
            L.gate_b.empty() ? nullptr : L.gate_b.data(), g);
  parallel(rows * inter, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {  // g <- d/dgate, dact <- d/dup
      const float z = g[i], sg = 1.0f / (1.0f + std::exp(-z));
      const float da = dact[i];
      g[i] = da * s.up[i] * sg * (1.0f + z * (1.0f - sg));
      dact[i] = da * z * sg;
    }
  });
  weight_grad(wants, grad, R::kMlpGate, l, g, s.h2.data(), rows, d, inter, scratch_);
  weight_grad(wants, grad, R::kMlpUp, l, dact, s.h2.data(), rows, d, inter, scratch_);
  dh_.resize(static_cast<size_t>(rows * d));  // the head's part is spent by now
  float* dh = dh_.data();
  gemm(false, false, rows, d, inter, 1.0f, g, inter, L.gate.data(), d, 0.0f, dh, d);
  gemm(false, false, rows, d, inter, 1.0f, dact, inter, L.up.data(), d, 1.0f, dh, d);
  norm_backward(wants, grad, R::kNormMlp, l, s.x1.data(), L.norm_mlp.data(), rows, d, dh, dx);

  // Attention: x1 = x + attention(rope(q), rope(k), v)·Wo^T, q/k/v from h1 = rms_norm(x).
  datt_.resize(static_cast<size_t>(rows * qd));
  gemm(false, false, rows, qd, d, 1.0f, dx, d, L.o.data(), qd, 0.0f, datt_.data(), qd);
  weight_grad(wants, grad, R::kAttnO, l, dx, s.att.data(), rows, qd, d, scratch_);
  dq_.resize(static_cast<size_t>(rows * qd));
  dk_.resize(static_cast<size_t>(rows * kvd));
  dv_.resize(static_cast<size_t>(rows * kvd));
  attention_backward(s, datt_.data(), dq_.data(), dk_.data(), dv_.data());
  rope_rows(c_, cs_.data(), sn_.data(), n_, 0, rows, dq_.data(), dk_.data());
  if (!L.q_norm.empty()) {  // qwen3: the per-head norms before RoPE, on recomputed projections
    lin_.resize(static_cast<size_t>(rows * qd));
    dlin_.assign(static_cast<size_t>(rows * qd), 0.0f);
    matmul_nt(s.h1.data(), rows, d, L.q.data(), qd, L.q_b.empty() ? nullptr : L.q_b.data(),
              lin_.data());
    norm_backward(wants, grad, R::kQNorm, l, lin_.data(), L.q_norm.data(),
                  rows * c_.num_attention_heads, hd, dq_.data(), dlin_.data());
    dq_.swap(dlin_);
    lin_.resize(static_cast<size_t>(rows * kvd));
    dlin_.assign(static_cast<size_t>(rows * kvd), 0.0f);
    matmul_nt(s.h1.data(), rows, d, L.k.data(), kvd, L.k_b.empty() ? nullptr : L.k_b.data(),
              lin_.data());
    norm_backward(wants, grad, R::kKNorm, l, lin_.data(), L.k_norm.data(),
                  rows * c_.num_key_value_heads, hd, dk_.data(), dlin_.data());
    dk_.swap(dlin_);
  }
  weight_grad(wants, grad, R::kAttnQ, l, dq_.data(), s.h1.data(), rows, d, qd, scratch_);
  weight_grad(wants, grad, R::kAttnK, l, dk_.data(), s.h1.data(), rows, d, kvd, scratch_);
  weight_grad(wants, grad, R::kAttnV, l, dv_.data(), s.h1.data(), rows, d, kvd, scratch_);
  gemm(false, false, rows, d, qd, 1.0f, dq_.data(), qd, L.q.data(), d, 0.0f, dh, d);
  gemm(false, false, rows, d, kvd, 1.0f, dk_.data(), kvd, L.k.data(), d, 1.0f, dh, d);
  gemm(false, false, rows, d, kvd, 1.0f, dv_.data(), kvd, L.v.data(), d, 1.0f, dh, d);
  norm_backward(wants, grad, R::kNormAttn, l, s.x.data(), L.norm_attn.data(), rows, d, dh, dx);
}

void F32Backprop::attention_backward(const Saved& s, const float* datt, float* dq, float* dk,
                                     float* dv) {
  const int64_t n = n_, hd = c_.head_dim, nh = c_.num_attention_heads;
  const int64_t nkv = c_.num_key_value_heads, qd = nh * hd, kvd = nkv * hd, group = nh / nkv;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  std::fill_n(dk, seqs_ * n * kvd, 0.0f);
  std::fill_n(dv, seqs_ * n * kvd, 0.0f);
  p_.resize(static_cast<size_t>(n * n));
  dp_.resize(static_cast<size_t>(n * n));
  float* p = p_.data();
  float* dp = dp_.data();
  for (int64_t sq = 0; sq < seqs_; ++sq) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      const float* q = s.q.data() + sq * n * qd + h * hd;
      const float* k = s.k.data() + sq * n * kvd + g * hd;
      const float* v = s.v.data() + sq * n * kvd + g * hd;
      const float* o = s.att.data() + sq * n * qd + h * hd;
      const float* da = datt + sq * n * qd + h * hd;
      // P = causal softmax(scale · q k^T), recomputed; dP = dA v^T.
      gemm(false, true, n, n, hd, scale, q, qd, k, kvd, 0.0f, p, n);
      gemm(false, true, n, n, hd, 1.0f, da, qd, v, kvd, 0.0f, dp, n);
      // Row i costs i + 1: eight slices a thread even that out.
      parallel(
          n,
          [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
              float* pr = p + i * n;
              softmax_simd(pr, i + 1);
              std::fill(pr + i + 1, pr + n, 0.0f);
              double dsum = 0.0;  // Σ_j P_ij dP_ij = dA_i · O_i
              for (int64_t c = 0; c < hd; ++c)
                dsum += static_cast<double>(da[i * qd + c]) * o[i * qd + c];
              float* dr = dp + i * n;
              for (int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - static_cast<float>(dsum));
              std::fill(dr + i + 1, dr + n, 0.0f);
            }
          },
          8);
      gemm(false, false, n, hd, n, scale, dp, n, k, kvd, 0.0f, dq + sq * n * qd + h * hd, qd);
      gemm(true, false, n, hd, n, scale, dp, n, q, qd, 1.0f, dk + sq * n * kvd + g * hd, kvd);
      gemm(true, false, n, hd, n, 1.0f, p, n, da, qd, 1.0f, dv + sq * n * kvd + g * hd, kvd);
    }
  }
}

}  // namespace tq
