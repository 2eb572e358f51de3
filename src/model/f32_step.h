// The decoder layer's stages (model/layer.h run_layer) in f32 through OpenBLAS: the step of the
// reference runtime, GPTQ calibration and sensitivity. Matches mlx-lm's llama.py / qwen2.py /
// qwen3.py (FORMATS.md §7) and qwen3_5.py (docs/QWEN35.md) computed in f32.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/layer.h"
#include "model/model_config.h"
#include "model/tensor_table.h"

namespace tq {

using F32Layer = LayerTensors<std::vector<float>>;
using F32Tensors = ModelTensors<std::vector<float>>;

// A stand-in for one weight matrix during a call: products of `role` read `w` (same shape)
// instead of the layer's own weight (sensitivity: the quantized variant of one module).
struct WeightOverride {
  TensorRole role = TensorRole::kAttnQ;
  const float* w = nullptr;
};

// Sees the input x [rows, cols] of every linear product of a call, before it runs.
using LinearTap = std::function<void(TensorRole role, const float* x, int64_t rows, int64_t cols)>;

// What one call of the stages reads and writes: `seqs` sequences of n rows each (rows = seqs * n)
// at positions p0 .. p0 + n - 1; seqs > 1 only with p0 == 0. Sequence s's keys and values of
// positions [0, p0 + n) are rows of k, v from s * (p0 + n) * kvd; qkv writes the new ones at p0.
struct F32Io {
  int64_t n = 0, seqs = 1, p0 = 0;
  float* x = nullptr;                          // [rows, d] residual stream, updated in place
  float* h = nullptr;                          // [rows, d] normed input / branch output
  float *q = nullptr, *att = nullptr;          // [rows, qd]
  float *k = nullptr, *v = nullptr;            // keys, values (above)
  float *gate = nullptr, *up = nullptr;        // [rows, inter]; gate holds the activation
  const float *cos = nullptr, *sin = nullptr;  // RoPE table [n, rotary_dims / 2]
  // qwen3_5 gated attention: the output gate [rows, qd] (q_proj's second half per head), and
  // q_proj's whole output [rows, 2 qd].
  float *att_gate = nullptr, *qg = nullptr;
  // qwen3_5 Gated DeltaNet: in_proj outputs qkv [rows, C] (the conv's output, in place), z
  // [rows, vd], b and a [rows, Hv]; the output y goes to att [rows, vd]. Sequence s's conv
  // state [K-1, C] and delta-rule state [Hv, dv, dk] are at conv_state + s (K-1) C and
  // ssm_state + s Hv dv dk; at p0 == 0 they start from zeros.
  float *lin_qkv = nullptr, *lin_z = nullptr, *lin_b = nullptr, *lin_a = nullptr;
  float *conv_state = nullptr, *ssm_state = nullptr;
  const WeightOverride* weight = nullptr;
  const LinearTap* tap = nullptr;
  int64_t rows() const { return n * seqs; }
};

// Owns the buffers of an F32Io; bind() sizes them and points an F32Io at them. k and v default
// to its own [rows, kvd] (positions from 0); pass a KV cache's rows to attend over a prefix.
class F32Buffers {
 public:
  F32Io bind(const ModelConfig& c, const std::vector<double>& inv_freq, float* x, int64_t n,
             int64_t seqs = 1, int64_t p0 = 0, float* k = nullptr, float* v = nullptr);
  // Only what the MLP stages use (h, gate, up) for `rows` rows.
  F32Io bind_mlp(const ModelConfig& c, float* x, int64_t rows);

 private:
  std::vector<float> h_, q_, att_, k_, v_, gate_, up_, cos_, sin_;
  std::vector<float> att_gate_, qg_, lin_qkv_, lin_z_, lin_b_, lin_a_, conv_state_, ssm_state_;
};

class F32Step {
 public:
  explicit F32Step(const ModelConfig& c) : c_(c) {}
  // Gated DeltaNet prefill of `min_tokens` or more runs in chunks of `chunk` tokens (the WY
  // form); shorter calls, and chunk <= 1, run token by token.
  void set_delta_chunk(int64_t chunk, int64_t min_tokens) {
    delta_chunk_ = chunk, delta_chunk_min_ = min_tokens;
  }
  void attn_norm(const F32Layer& L, F32Io& io) const;
  void qkv(const F32Layer& L, F32Io& io) const;
  void attn_core(const F32Layer& L, F32Io& io) const;
  void attn_out(const F32Layer& L, F32Io& io) const;
  void mlp_norm(const F32Layer& L, F32Io& io) const;
  void mlp_act(const F32Layer& L, F32Io& io) const;
  void mlp_out(const F32Layer& L, F32Io& io) const;
  void run(const F32Layer& L, F32Io& io) const { run_layer(*this, L, io); }

 private:
  // The Gated DeltaNet halves of qkv / attn_core / attn_out (L.linear).
  void lin_in(const F32Layer& L, F32Io& io) const;
  void lin_core(const F32Layer& L, F32Io& io) const;
  void lin_out(const F32Layer& L, F32Io& io) const;
  // y [rows, out] = x [rows, in] · W^T (+ bias), W the layer's or io's override for `role`.
  void linear(TensorRole role, const std::vector<float>& w, const std::vector<float>& bias,
              const float* x, int64_t in, int64_t out, float* y, const F32Io& io) const;
  ModelConfig c_;
  int64_t delta_chunk_ = 32, delta_chunk_min_ = 32;  // delta_chunk_from_env's default
};

}  // namespace tq
