// One decoder layer's f32 forward on one calibration sequence (positions 0..seq-1), split at
// the inputs of its linear modules so GPTQ can collect each Hessian after the quantized
// upstream path has run (FORMATS.md §5.2, true-sequential order). Same math as
// model/forward.cc (llama / qwen2 / qwen3), through the same kernels.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.h"
#include "model/model_config.h"
#include "tensor/tensor.h"

namespace tq {

// One decoder layer's weights as f32; absent biases and q/k norms are empty.
struct LayerWeights {
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

// Fills LayerWeights from a layer's float tensors keyed by HF name (model.layers.{L}.*);
// errors name the missing or misshapen tensor.
Result<LayerWeights> layer_weights_from(const std::map<std::string, FloatTensor>& tensors,
                                        const ModelConfig& cfg, int64_t layer);
// The weight matrix a linear module's HF weight name refers to, or nullptr.
std::vector<float>* layer_matrix(LayerWeights& w, const ModelConfig& cfg, const std::string& name);

class LayerRunner {
 public:
  static Result<LayerRunner> create(const ModelConfig& cfg, int64_t seq);

  int64_t seq() const { return seq_; }
  int64_t d() const { return cfg_.hidden_size; }
  int64_t qd() const { return cfg_.num_attention_heads * cfg_.head_dim; }
  int64_t inter() const { return cfg_.intermediate_size; }

  // Each stage reads and writes one sequence, [seq, width] row-major.
  void attn_input(const LayerWeights& w, const float* x, float* h) const;  // rms_norm; [seq, d]
  // q/k/v projections, q/k norms, RoPE, causal attention: att [seq, qd]
  void attention(const LayerWeights& w, const float* h, float* att);
  // x_mid = x + o(att): [seq, d] (x_mid may alias x)
  void attn_residual(const LayerWeights& w, const float* x, const float* att, float* x_mid);
  void mlp_input(const LayerWeights& w, const float* x_mid, float* h2) const;  // [seq, d]
  void mlp_act(const LayerWeights& w, const float* h2, float* act);  // silu(gate)·up [seq, inter]
  // out = x_mid + down(act): [seq, d] (out may alias x_mid)
  void mlp_residual(const LayerWeights& w, const float* x_mid, const float* act, float* out);
  // The whole layer: out = layer(x) [seq, d] (out may alias x).
  void full(const LayerWeights& w, const float* x, float* out);

 private:
  ModelConfig cfg_;
  int64_t seq_ = 0;
  std::vector<float> cos_, sin_;            // [seq, hd/2]
  std::vector<float> k_, v_, up_;           // [seq, kvd], [seq, kvd], [seq, inter]
  std::vector<float> h_, att_, act_, tmp_;  // scratch for full() and the residual products
};

}  // namespace tq
