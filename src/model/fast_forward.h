// The fast runtime: the same forward pass as model/forward.cc's reference, with the weight
// matrices used as the checkpoint stores them (MLX packed codes or f32/f16/bf16, memory-mapped,
// never dequantized at load), the packed SIMD kernels, and a thread pool over output rows.
// Reached through Transformer::load(src, RuntimeOptions{}); not used directly elsewhere.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "base/result.h"
#include "model/forward.h"

namespace tq {

class FastModel {
 public:
  ~FastModel();
  // `cfg` was checked by Transformer::load; `inv_freq` are its RoPE frequencies.
  static Result<std::unique_ptr<FastModel>> load(const ModelSource& src, const RuntimeOptions& opts,
                                                 std::vector<double> inv_freq,
                                                 std::function<void(int64_t, int64_t)> progress);

  // As Transformer::forward, whose checks have already passed. One call at a time (scratch
  // buffers are reused across calls: no allocation per token once they have grown).
  Status forward(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits,
                 bool all_logits) const;

  // An empty cache in this runtime's layout (model/forward.h KvCache), and whether `cache` is one.
  KvCache new_cache(int64_t capacity) const;
  bool fits(const KvCache& cache) const;

  std::string name() const;
  uint64_t bytes_per_token() const;
  int threads() const;

 private:
  FastModel();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq
