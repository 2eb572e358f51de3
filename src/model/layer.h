// One decoder layer's tensors and the order of its stages, shared by every pass: the reference
// runtime, the fast runtime, GPTQ calibration and sensitivity (llama / qwen2 / qwen3 / qwen3_5).
// `M` is how a weight matrix is held: std::vector<float> (f32 passes) or PackedMatrix (fast).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/result.h"
#include "model/model_config.h"
#include "model/tensor_table.h"

namespace tq {

template <typename M>
struct LayerTensors {
  // qwen3_5: a Gated DeltaNet layer (the lin_* fields) instead of attention (q, k, v, o).
  bool linear = false;
  std::vector<float> norm_attn, norm_mlp;  // [d]
  M q, k, v, o;                            // [qd, d] ([2 qd, d] gated), [kvd, d], [kvd, d], [d, qd]
  M gate, up, down;                        // [inter, d], [inter, d], [d, inter]
  std::vector<float> q_norm, k_norm;       // [hd] (qwen3), else empty
  std::vector<float> q_b, k_b, v_b, o_b;   // [qd], [kvd], [kvd], [d] (qwen2), else empty
  std::vector<float> gate_b, up_b, down_b;  // [inter], [inter], [d], else empty
  // Gated DeltaNet (C = 2·Hk·dk + Hv·dv conv channels, vd = Hv·dv).
  M lin_qkv, lin_z, lin_b, lin_a, lin_out;    // [C, d], [vd, d], [Hv, d], [Hv, d], [d, vd]
  std::vector<float> lin_conv;                // [C, K] depthwise kernel (K-1: current token)
  std::vector<float> lin_dt_bias, lin_a_log;  // [Hv]
  std::vector<float> lin_norm;                // [dv] gated RMSNorm weight
};

template <typename M>
struct ModelTensors {
  M embed;    // [vocab, d]
  M lm_head;  // [vocab, d] when untied
  bool tied = true;
  std::vector<float> norm_final;  // [d]
  std::vector<LayerTensors<M>> layers;
  const M& head() const { return tied ? embed : lm_head; }
};

// The one role -> field mapping: calls f(field) with the tensor of `role` (a matrix M& or a
// std::vector<float>&) and returns true, or returns false for roles a layer does not hold.
template <typename Layer, typename F>
bool with_layer_tensor(Layer& L, TensorRole role, F&& f) {
  using R = TensorRole;
  switch (role) {
    case R::kAttnQ:
      return f(L.q), true;
    case R::kAttnK:
      return f(L.k), true;
    case R::kAttnV:
      return f(L.v), true;
    case R::kAttnO:
      return f(L.o), true;
    case R::kMlpGate:
      return f(L.gate), true;
    case R::kMlpUp:
      return f(L.up), true;
    case R::kMlpDown:
      return f(L.down), true;
    case R::kNormAttn:
      return f(L.norm_attn), true;
    case R::kNormMlp:
      return f(L.norm_mlp), true;
    case R::kQNorm:
      return f(L.q_norm), true;
    case R::kKNorm:
      return f(L.k_norm), true;
    case R::kAttnQBias:
      return f(L.q_b), true;
    case R::kAttnKBias:
      return f(L.k_b), true;
    case R::kAttnVBias:
      return f(L.v_b), true;
    case R::kAttnOBias:
      return f(L.o_b), true;
    case R::kMlpGateBias:
      return f(L.gate_b), true;
    case R::kMlpUpBias:
      return f(L.up_b), true;
    case R::kMlpDownBias:
      return f(L.down_b), true;
    case R::kLinQkv:
      return f(L.lin_qkv), true;
    case R::kLinZ:
      return f(L.lin_z), true;
    case R::kLinB:
      return f(L.lin_b), true;
    case R::kLinA:
      return f(L.lin_a), true;
    case R::kLinOut:
      return f(L.lin_out), true;
    case R::kLinConv:
      return f(L.lin_conv), true;
    case R::kLinDtBias:
      return f(L.lin_dt_bias), true;
    case R::kLinALog:
      return f(L.lin_a_log), true;
    case R::kLinNorm:
      return f(L.lin_norm), true;
    default:
      return false;
  }
}

// As with_layer_tensor over a whole model (ModelTensors, const or not): `layer` < 0 for the
// globals; lm_head is its own field even when tied (ModelTensors::head picks).
template <typename Model, typename F>
bool with_model_tensor(Model& m, TensorRole role, int64_t layer, F&& f) {
  if (layer >= 0) {
    if (layer >= static_cast<int64_t>(m.layers.size())) return false;
    return with_layer_tensor(m.layers[static_cast<size_t>(layer)], role, std::forward<F>(f));
  }
  switch (role) {
    case TensorRole::kEmbed:
      return f(m.embed), true;
    case TensorRole::kLmHead:
      return f(m.lm_head), true;
    case TensorRole::kNormFinal:
      return f(m.norm_final), true;
    default:
      return false;
  }
}

// The sizes every pass indexes with, checked once (Status) before any pass allocates by them.
Status check_geometry(const ModelConfig& c);

// A vector loaded as stored becomes what the stages apply: a zero-centred norm w -> 1 + w.
template <typename T>
void finish_loaded(const TensorSpec& s, T& field) {
  if constexpr (std::is_same_v<T, std::vector<float>>)
    if (s.kind->zero_centred)
      for (float& w : field) w += 1.0f;
}

// Fills `m` with every tensor `cfg` implies (expected_tensors): get(spec, field) -> Status loads
// one into its field (M& or std::vector<float>&). `progress(done, total)` per tensor.
template <typename M, typename Get, typename Progress>
Status load_model_tensors(const ModelConfig& cfg, ModelTensors<M>& m, Get&& get,
                          Progress&& progress) {
  m.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    m.layers[static_cast<size_t>(l)].linear = cfg.linear_layer(l);
  const std::vector<TensorSpec> specs = expected_tensors(cfg);
  const int64_t total = static_cast<int64_t>(specs.size());
  for (int64_t i = 0; i < total; ++i) {
    const TensorSpec& s = specs[static_cast<size_t>(i)];
    Status st = ok_status();
    with_model_tensor(m, s.kind->role, s.layer, [&](auto& field) {
      st = get(s, field);
      if (st.ok()) finish_loaded(s, field);
    });
    if (!st.ok()) return st;
    if (s.kind->role == TensorRole::kLmHead) m.tied = false;
    if (progress) progress(i + 1, total);
  }
  return ok_status();
}

// The same for one layer's tensors only.
template <typename M, typename Get>
Status load_layer_tensors(const ModelConfig& cfg, int64_t layer, LayerTensors<M>& L, Get&& get) {
  L.linear = cfg.linear_layer(layer);
  for (const TensorSpec& s : expected_tensors(cfg)) {
    if (s.layer != layer) continue;
    Status st = ok_status();
    with_layer_tensor(L, s.kind->role, [&](auto& field) {
      st = get(s, field);
      if (st.ok()) finish_loaded(s, field);
    });
    if (!st.ok()) return st;
  }
  return ok_status();
}

// The order of a decoder layer's stages, for every runtime: `step` provides them, `io` is what
// they read and write (the step's own type). The three mixer stages take the layer's kind:
//   attn_norm  h = rms_norm(x)
//   qkv        attention: q, k, v = h·W^T (+ b); qwen3's per-head norms; RoPE (qwen3_5: q_proj
//              also gives the output gate, RoPE on the first rotary_dims of each head)
//              DeltaNet: qkv, z, b, a = h·W^T of in_proj_qkv/z/b/a
//   attn_core  attention: att = causal attention of q over the keys and values of [0, p0 + n)
//              DeltaNet: causal conv1d (with its state), SiLU, the gated delta rule (its state)
//   attn_out   attention: x += (att ⊙ sigmoid(gate) on qwen3_5)·Wo^T
//              DeltaNet: x += (rms_norm(y)·w ⊙ silu(z))·Wout^T
//   mlp_norm   h = rms_norm(x)
//   mlp_act    act = silu(h·Wg^T) * (h·Wu^T)
//   mlp_out    x += act·Wd^T
template <typename Step, typename Layer, typename Io>
void run_layer(const Step& step, const Layer& L, Io& io) {
  step.attn_norm(L, io);
  step.qkv(L, io);
  step.attn_core(L, io);
  step.attn_out(L, io);
  step.mlp_norm(L, io);
  step.mlp_act(L, io);
  step.mlp_out(L, io);
}

}  // namespace tq
