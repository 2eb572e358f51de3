// One block of 16 positions of a fast-runtime KV cache as a flat run of bytes, so a prompt
// cache can keep it apart from the sequence that computed it and put it back into another
// sequence's cache (any capacity) bit for bit. Per layer: each KV head's keys in the cache's
// transposed order [head_dim, 16], then the block's values [16, kv heads * head_dim].
#pragma once

#include <cstdint>
#include <span>

#include "base/result.h"
#include "model/forward.h"

namespace tq {

inline constexpr int64_t kKvBlockPositions = 16;

struct KvBlockShape {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t elem_bytes = 0;  // 2: f16 bits, 4: f32
  int64_t bytes() const {
    return 2 * layers * kv_heads * head_dim * kKvBlockPositions * elem_bytes;
  }
};

// The block shape of caches like `c` (made by Transformer::new_cache for a model of `cfg`);
// an error for layouts blocks cannot be cut from: the reference runtime's rows, and models with
// recurrent state (DeltaNet layers: the state at a block boundary is not kept).
Result<KvBlockShape> kv_block_shape(const KvCache& c, const ModelConfig& cfg);

// Copies block `block` (positions 16*block .. 16*block+15) out of / into a cache of shape `s`;
// `bytes` has s.bytes() bytes. The caller keeps block within the capacity.
void kv_block_read(const KvCache& c, const KvBlockShape& s, int64_t block,
                   std::span<uint8_t> bytes);
void kv_block_write(KvCache& c, const KvBlockShape& s, int64_t block,
                    std::span<const uint8_t> bytes);

}  // namespace tq
