// The decoder layer's stages (model/layer.h run_layer) in f32 through OpenBLAS: the step of the
// reference runtime, GPTQ calibration and sensitivity. Matches mlx-lm's llama.py / qwen2.py /
// qwen3.py (FORMATS.md §7) computed in f32.
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
  const float *cos = nullptr, *sin = nullptr;  // RoPE table [n, head_dim / 2]
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
};

class F32Step {
 public:
  explicit F32Step(const ModelConfig& c) : c_(c) {}
  void attn_norm(const F32Layer& L, F32Io& io) const;
  void qkv(const F32Layer& L, F32Io& io) const;
  void attn_core(const F32Layer& L, F32Io& io) const;
  void attn_out(const F32Layer& L, F32Io& io) const;
  void mlp_norm(const F32Layer& L, F32Io& io) const;
  void mlp_act(const F32Layer& L, F32Io& io) const;
  void mlp_out(const F32Layer& L, F32Io& io) const;
  void run(const F32Layer& L, F32Io& io) const { run_layer(*this, L, io); }

 private:
  // y [rows, out] = x [rows, in] · W^T (+ bias), W the layer's or io's override for `role`.
  void linear(TensorRole role, const std::vector<float>& w, const std::vector<float>& bias,
              const float* x, int64_t in, int64_t out, float* y, const F32Io& io) const;
  ModelConfig c_;
};

}  // namespace tq
