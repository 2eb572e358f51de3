// The reference f32 forward pass cut into pieces, for measurements that re-run only part of the
// model from cached hidden states (tq sensitivity): embed, one decoder layer (or only its
// attention or MLP half), and the head, each with an optional replacement for one weight.
// Same math as model/forward.cc (one independent window from position 0, no KV cache).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/result.h"
#include "model/model_config.h"
#include "model/model_source.h"
#include "model/tensor_table.h"

namespace tq {

// A stand-in for one weight matrix during a call: `role` at the layer being run (or kEmbed /
// kLmHead for embed() and head()) reads `w` (same shape) instead of the model's own weight.
struct WeightOverride {
  TensorRole role = TensorRole::kAttnQ;
  const float* w = nullptr;
};

class LayerRunner {
 public:
  ~LayerRunner();
  static Result<std::unique_ptr<LayerRunner>> load(
      const ModelSource& src, std::function<void(int64_t, int64_t)> progress = nullptr);

  const ModelConfig& config() const;
  // The f32 weight of a quantizable role (layer -1 for embed / lm_head; lm_head of a tied model
  // is the embedding); empty span when the model has no such tensor.
  std::span<const float> weight(TensorRole role, int64_t layer) const;

  // x [n, d] = embedding rows of `tokens` (ids checked by the caller).
  void embed(std::span<const int32_t> tokens, float* x, const WeightOverride* ov = nullptr) const;
  // x [seqs * n, d] <- x + attention(x) of layer `l`: `seqs` independent sequences of n rows,
  // each at positions 0..n-1 (one batch, so the projections are one large product).
  void attention_half(int64_t l, float* x, int64_t n, const WeightOverride* ov = nullptr,
                      int64_t seqs = 1) const;
  // x [n, d] <- x + mlp(x) of layer `l` (row by row: n may count rows of several sequences).
  void mlp_half(int64_t l, float* x, int64_t n, const WeightOverride* ov = nullptr) const;
  void layer(int64_t l, float* x, int64_t n, const WeightOverride* ov = nullptr,
             int64_t seqs = 1) const {
    attention_half(l, x, n, ov, seqs);
    mlp_half(l, x, n * seqs, ov);
  }
  // logits [n, vocab] = final_norm(x) · head^T; a kLmHead (or, tied, kEmbed) override replaces
  // the head.
  void head(const float* x, int64_t n, float* logits, const WeightOverride* ov = nullptr) const;

 private:
  LayerRunner();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq
