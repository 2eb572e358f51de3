// A model's weights as f32 (every matrix dequantized at load, as mlx computes with f32
// activations) and the f32 layer step over them: the reference runtime's model, and the one
// sensitivity re-runs piecewise from cached hidden states (embed, a layer or one half of it,
// the head), each with an optional replacement for one weight.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/result.h"
#include "model/f32_step.h"
#include "model/model_source.h"

namespace tq {

class F32Model {
 public:
  // Every tensor of `src` as TensorSource::load_f32_compute gives it; `progress(done, total)`
  // per tensor.
  static Result<std::unique_ptr<F32Model>> load(
      const ModelSource& src, std::function<void(int64_t, int64_t)> progress = nullptr);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  const F32Tensors& tensors() const { return t_; }
  const F32Step& step() const { return step_; }
  void set_delta_chunk(int64_t chunk, int64_t min_tokens) {
    step_.set_delta_chunk(chunk, min_tokens);
  }
  // The weight of a quantizable role (layer -1 for embed / lm_head; lm_head of a tied model is
  // the embedding); empty when the model has no such tensor.
  std::span<const float> weight(TensorRole role, int64_t layer) const;

  // x [n, d] = embedding rows of `tokens` (ids checked by the caller); a kEmbed override
  // replaces the table.
  void embed(std::span<const int32_t> tokens, float* x, const WeightOverride* ov = nullptr) const;
  // x [seqs * n, d] += attention(x) of layer l: `seqs` independent sequences of n rows, each at
  // positions 0 .. n - 1, as one batch.
  void attention_half(int64_t l, float* x, int64_t n, const WeightOverride* ov = nullptr,
                      int64_t seqs = 1) const;
  // x [rows, d] += mlp(x) of layer l (row by row: rows may span several sequences).
  void mlp_half(int64_t l, float* x, int64_t rows, const WeightOverride* ov = nullptr) const;
  void layer(int64_t l, float* x, int64_t n, const WeightOverride* ov = nullptr,
             int64_t seqs = 1) const;
  // layer() in the caller's buffers, kept between calls (a loop over layers and steps then
  // allocates, and the kernel zeroes, no fresh pages per layer).
  void layer(int64_t l, float* x, int64_t n, int64_t seqs, F32Buffers& buf) const;
  // logits [n, vocab] = final_norm(x) · head^T; a kLmHead (tied: kEmbed) override replaces it.
  void head(const float* x, int64_t n, float* logits, const WeightOverride* ov = nullptr) const;

 private:
  explicit F32Model(const ModelConfig& c) : cfg_(c), step_(c) {}
  ModelConfig cfg_;
  std::vector<double> inv_freq_;
  F32Tensors t_;
  F32Step step_;
};

}  // namespace tq
