// What a Transformer runs on: the f32 reference runtime (model/reference_runtime.cc) or the
// fast one (model/fast_runtime.cc). Transformer::load picks one; Transformer::forward checks
// the arguments before either sees them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "base/result.h"
#include "model/forward.h"

namespace tq {

class Runtime {
 public:
  virtual ~Runtime() = default;
  // As Transformer::forward_batch, whose checks have passed.
  virtual Status forward(std::span<const SeqStep> seqs) const = 0;
  // An empty cache in this runtime's layout (model/forward.h KvCache), and whether `cache` is one.
  virtual KvCache new_cache(int64_t capacity) const = 0;
  virtual bool fits(const KvCache& cache) const = 0;
  virtual std::string name() const = 0;
  virtual uint64_t bytes_per_token() const = 0;
  virtual int threads() const = 0;
  // qwen3_5's MTP head (RuntimeOptions::mtp): whether it is loaded, a cache for its one
  // attention layer and whether `cache` is one, and Transformer::mtp_forward, checked.
  virtual bool has_mtp() const = 0;
  virtual KvCache new_mtp_cache(int64_t capacity) const = 0;
  virtual bool fits_mtp(const KvCache& cache) const = 0;
  virtual Status mtp_forward(std::span<const float> hidden, std::span<const int32_t> next_tokens,
                             KvCache& cache, std::span<float> logits) const = 0;
};

using LoadProgress = std::function<void(int64_t, int64_t)>;

// qwen3_5: Gated DeltaNet calls of this many tokens and more run in chunks of as many (the WY
// form); shorter ones token by token. TQ_DELTA_CHUNK (0 or 1: always token by token), else 32
// (fastest of 32/64/128 on Zen 5, bench/README.md).
Result<int64_t> delta_chunk_from_env();

// `src.config` has passed check_geometry; `inv_freq` are its RoPE frequencies.
Result<std::unique_ptr<Runtime>> load_reference_runtime(const ModelSource& src,
                                                        const RuntimeOptions& opts,
                                                        LoadProgress progress);
// The fast one maps the checkpoint's files itself, so `src` may be released after this returns.
Result<std::unique_ptr<Runtime>> load_fast_runtime(const ModelSource& src,
                                                   const RuntimeOptions& opts,
                                                   std::vector<double> inv_freq,
                                                   LoadProgress progress);

}  // namespace tq
