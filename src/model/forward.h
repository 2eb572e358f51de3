// The forward pass (llama / qwen2 / qwen3), driven by ModelConfig, on one of two runtimes
// (model/runtime.h): the f32 reference and the fast one. Both run the decoder layer of
// model/layer.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "model/model_config.h"
#include "model/model_source.h"

namespace tq {

// Keys and values of every layer for up to `capacity` positions, in the layout of the runtime
// that made it (Transformer::new_cache; forward refuses a cache that does not fit).
//   kRows (reference runtime): k, v f32 [layers, capacity, kvd].
//   kFastF32 / kFastF16: keys [layers, n_kv, capacity / 16 (rounded up), head_dim, 16], blocks of
//   16 positions transposed within (attention scores read consecutive positions as vectors and
//   a block as one contiguous run), and values [layers, capacity, kvd]; f32 in k/v, or f16 bits
//   in k16/v16.
// qwen3_5 (kRows): k, v hold only the full-attention layers ([full layers, capacity, kvd]) and
// conv, ssm the Gated DeltaNet layers' constant-size states, f32 [linear layers, K-1, C] and
// [linear layers, Hv, dv, dk]; a forward from n == 0 starts them at zero. Going back to an
// earlier n > 0 is not possible for them (the states hold no history).
enum class KvLayout : uint8_t { kRows, kFastF32, kFastF16 };
struct KvCache {
  int64_t capacity = 0;
  int64_t n = 0;  // positions filled
  KvLayout layout = KvLayout::kRows;
  std::vector<float> k, v;
  std::vector<uint16_t> k16, v16;
  std::vector<float> conv, ssm;
  void clear() { n = 0; }
  int64_t bytes() const {
    return static_cast<int64_t>((k.size() + v.size() + conv.size() + ssm.size()) * sizeof(float) +
                                (k16.size() + v16.size()) * sizeof(uint16_t));
  }
};

// kFourBit: only the 4-bit affine matrices, whose lanes take no more bytes than their codes.
enum class Prepack : uint8_t { kAuto, kOn, kOff, kFourBit };

// Fast runtime: the element type of the KV cache. f16 halves the bytes decode attention reads.
enum class KvType : uint8_t { kF16, kF32 };

// Fast runtime: how products take their activations. kAuto: integer kernels (two int8 planes,
// kernels/packed_matmul.h ActQ8) for batches under 48 tokens and, on CPUs with AMX, for batches
// of 16+ (kernels/amx_matmul.h); f32 + OpenBLAS otherwise.
enum class ActPath : uint8_t { kAuto, kInt8, kF32 };

// One sequence of a batched forward call: its new tokens (appended to its own cache) and where
// its logits go ([tokens, vocab] when all_logits, else the last row's [vocab]).
struct SeqStep {
  std::span<const int32_t> tokens;
  KvCache* cache = nullptr;
  std::span<float> logits;
  bool all_logits = false;
  // Fast runtime: every token through the decode path (per-token kernels, attention one query
  // at a time), so each row's logits have the bits of feeding the tokens one call at a time
  // (speculative verification); the weights are still read once for all of them.
  bool per_token = false;
  // When not empty: the hidden states of the rows that get logits, before the final norm
  // ([rows, hidden]: what the qwen3_5 MTP head reads, Transformer::mtp_forward).
  std::span<float> hidden;
  // Fast runtime with batch_invariant: prompt tokens. Their rows take the batch kernels and
  // attention per query in blocks at any count, one token too, so each position gets the same
  // bits however its prompt is cut into chunks (unflagged one-token calls decode).
  bool prefill = false;
};

struct RuntimeOptions {
  bool reference = false;  // the f32 reference runtime instead of the fast one
  int threads = 0;         // fast runtime: threads in all (<= 0: one per core)
  ActPath activations = ActPath::kAuto;
  KvType kv_cache = KvType::kF16;  // fast runtime
  // Fast runtime, for A/B runs: bytes per waiting thread and product read ahead while decoding
  // (0: none), the integer register tiles for batches, the AMX tile kernel where the CPU has it.
  int64_t read_ahead = 1 << 20;
  bool tiles = true;
  bool amx = true;
  // Fast runtime: 2/3/4-bit codes prepacked at load for the lanes kernel (kernels/packed_matmul.h
  // pack_lanes), which then takes every batch size: decode, a server's batched rows and
  // prefill chunks on one kernel and one pass over the weights. kAuto: all where the weights
  // fit the last-level cache (one stream decodes faster there on the lanes); from DRAM the
  // 4-bit ones of an MLX directory on AMD (faster there) and none elsewhere (an Intel Xeon's
  // lanes were 15-20% slower; a GGUF's codes may be kept twice); in tq serve always on.
  Prepack prepack = Prepack::kAuto;
  // Fast runtime: a sequence's logits do not depend on what else shares its forward_batch call
  // (a server's promise): one-token sequences take the per-token kernels and longer ones the
  // batch kernels whatever the batch holds; never OpenBLAS or AMX.
  bool batch_invariant = false;
  // qwen3_5: load the multi-token-prediction head too (Transformer::mtp_forward); an error when
  // the model has none (docs/QWEN35.md "The MTP companion").
  bool mtp = false;
};

class Transformer {
 public:
  ~Transformer();
  // The runtime `opts` picks: the fast one (the default: packed weights memory-mapped, SIMD
  // kernels, a thread pool) or the f32 reference (opts.reference: every weight dequantized to
  // f32 at load, products through OpenBLAS). The fast one maps the checkpoint's files itself,
  // so `src` may be released after this returns. `progress(done, total)` per tensor.
  static Result<std::unique_ptr<Transformer>> load(
      const ModelSource& src, const RuntimeOptions& opts = {},
      std::function<void(int64_t, int64_t)> progress = nullptr);

  // "reference (OpenBLAS SkylakeX x2)" or "fast (AVX3_DL, 2 threads, auto activations)".
  std::string runtime_name() const;
  // Weight bytes one decode step reads (every matrix once, one embedding row): the roofline.
  uint64_t bytes_per_token() const;
  // Threads a forward pass uses (fast: the pool; reference: one per core, as OpenBLAS).
  int threads() const;

  const ModelConfig& config() const;
  KvCache new_cache(int64_t capacity) const;

  // Runs `tokens` at positions cache.n .. cache.n + tokens.size() - 1 and appends them to the
  // cache. Writes logits [tokens.size(), vocab] when all_logits, else only the last row [vocab].
  Status forward(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits,
                 bool all_logits = true) const;
  // Several sequences in one pass (each checked as forward checks it; caches distinct): on the
  // fast runtime their products run as one batch (each weight read once for all of them) and
  // attention runs per sequence over its own cache.
  Status forward_batch(std::span<const SeqStep> seqs) const;

  // qwen3_5's MTP head, when loaded with RuntimeOptions::mtp (model/mtp.h): draft logits
  // [n, vocab] for the tokens after `next_tokens`, from the trunk's hidden states [n, hidden]
  // (SeqStep::hidden) at positions cache.n .. cache.n + n - 1, next_tokens[i] being the token
  // at position cache.n + i + 1. Its one attention layer keeps its own cache (new_mtp_cache),
  // filled in step with the trunk's: the row of position t needs those of 0 .. t - 1.
  bool has_mtp() const;
  KvCache new_mtp_cache(int64_t capacity) const;
  Status mtp_forward(std::span<const float> hidden, std::span<const int32_t> next_tokens,
                     KvCache& cache, std::span<float> logits) const;

 private:
  Transformer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq
