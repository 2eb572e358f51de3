// One decoder layer's tensors and the order of its stages, shared by every pass: the reference
// runtime, the fast runtime, GPTQ calibration and sensitivity (llama / qwen2 / qwen3).
// `M` is how a weight matrix is held: std::vector<float> (f32 passes) or PackedMatrix (fast).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/result.h"
#include "model/model_config.h"
#include "model/tensor_table.h"

namespace tq {

template <typename M>
struct LayerTensors {
  std::vector<float> norm_attn, norm_mlp;   // [d]
  M q, k, v, o;                             // [qd, d], [kvd, d], [kvd, d], [d, qd]
  M gate, up, down;                         // [inter, d], [inter, d], [d, inter]
  std::vector<float> q_norm, k_norm;        // [hd] (qwen3), else empty
  std::vector<float> q_b, k_b, v_b, o_b;    // [qd], [kvd], [kvd], [d] (qwen2), else empty
  std::vector<float> gate_b, up_b, down_b;  // [inter], [inter], [d], else empty
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

// Fills `m` with every tensor `cfg` implies (expected_tensors): get(spec, field) -> Status loads
// one into its field (M& or std::vector<float>&). `progress(done, total)` per tensor.
template <typename M, typename Get, typename Progress>
Status load_model_tensors(const ModelConfig& cfg, ModelTensors<M>& m, Get&& get,
                          Progress&& progress) {
  m.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  const std::vector<TensorSpec> specs = expected_tensors(cfg);
  const int64_t total = static_cast<int64_t>(specs.size());
  for (int64_t i = 0; i < total; ++i) {
    const TensorSpec& s = specs[static_cast<size_t>(i)];
    Status st = ok_status();
    with_model_tensor(m, s.kind->role, s.layer, [&](auto& field) { st = get(s, field); });
    if (!st.ok()) return st;
    if (s.kind->role == TensorRole::kLmHead) m.tied = false;
    if (progress) progress(i + 1, total);
  }
  return ok_status();
}

// The same for one layer's tensors only.
template <typename M, typename Get>
Status load_layer_tensors(const ModelConfig& cfg, int64_t layer, LayerTensors<M>& L, Get&& get) {
  for (const TensorSpec& s : expected_tensors(cfg)) {
    if (s.layer != layer) continue;
    Status st = ok_status();
    with_layer_tensor(L, s.kind->role, [&](auto& field) { st = get(s, field); });
    if (!st.ok()) return st;
  }
  return ok_status();
}

// The order of a decoder layer's stages, for every runtime: `step` provides them, `io` is what
// they read and write (the step's own type).
//   attn_norm  h = rms_norm(x)
//   qkv        q, k, v = h·W^T (+ b); qwen3's per-head norms; RoPE
//   attn_core  att = causal attention of q over the keys and values of positions [0, p0 + n)
//   attn_out   x += att·Wo^T
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
