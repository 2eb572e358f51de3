// The reference forward pass (llama / qwen2 / qwen3) in f32, driven by ModelConfig.
// Weights are dequantized to f32 once at load; fast quantized kernels come later.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/result.h"
#include "model/model_config.h"
#include "model/model_source.h"

namespace tq {

// Keys and values of every layer for up to `capacity` positions.
struct KvCache {
  int64_t capacity = 0;
  int64_t n = 0;         // positions filled
  std::vector<float> k;  // [layers, capacity, n_kv_heads * head_dim]
  std::vector<float> v;  // [layers, capacity, n_kv_heads * head_dim]
  void clear() { n = 0; }
};

class Transformer {
 public:
  ~Transformer();
  // Loads every weight of `src` as f32 (TensorSource::load_f32_compute: MLX affine weights
  // dequantized in f32, as mlx computes with f32 activations). `progress(done, total)` is
  // called per tensor.
  static Result<std::unique_ptr<Transformer>> load(
      const ModelSource& src, std::function<void(int64_t, int64_t)> progress = nullptr);

  const ModelConfig& config() const;
  KvCache new_cache(int64_t capacity) const;

  // Runs `tokens` at positions cache.n .. cache.n + tokens.size() - 1 and appends them to the
  // cache. Writes logits [tokens.size(), vocab] when all_logits, else only the last row [vocab].
  Status forward(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits,
                 bool all_logits = true) const;

 private:
  Transformer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq
