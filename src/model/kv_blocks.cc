#include "model/kv_blocks.h"

#include <cstring>

namespace tq {
namespace {

// Positions a layer's keys have room for per KV head (whole blocks), as the fast runtime lays
// them out (model/forward.h KvCache).
int64_t key_stride(int64_t capacity) {
  return (capacity + kKvBlockPositions - 1) / kKvBlockPositions * kKvBlockPositions;
}

// Calls f(cache offset in elements, block offset in elements, elements) for each contiguous run.
template <typename F>
void for_each_run(const KvBlockShape& s, int64_t capacity, int64_t block, F&& f) {
  const int64_t kvd = s.kv_heads * s.head_dim, ks = key_stride(capacity);
  const int64_t krun = s.head_dim * kKvBlockPositions, vrun = kKvBlockPositions * kvd;
  int64_t off = 0;
  for (int64_t l = 0; l < s.layers; ++l) {
    for (int64_t g = 0; g < s.kv_heads; ++g, off += krun)
      f(true, l * kvd * ks + g * s.head_dim * ks + block * krun, off, krun);
    f(false, l * kvd * capacity + block * vrun, off, vrun);
    off += vrun;
  }
}

}  // namespace

Result<KvBlockShape> kv_block_shape(const KvCache& c, const ModelConfig& cfg) {
  if (c.layout == KvLayout::kRows) return err("the prompt cache needs the fast runtime's KV cache");
  if (!c.conv.empty() || !c.ssm.empty())
    return err("the prompt cache does not keep recurrent (DeltaNet) state");
  KvBlockShape s;
  s.kv_heads = cfg.num_key_value_heads;
  s.head_dim = cfg.head_dim;
  s.elem_bytes = c.layout == KvLayout::kFastF16 ? 2 : 4;
  s.layers = cfg.num_hidden_layers;
  const int64_t kvd = s.kv_heads * s.head_dim;
  const size_t vs = c.layout == KvLayout::kFastF16 ? c.v16.size() : c.v.size();
  if (kvd <= 0 || vs != static_cast<size_t>(s.layers * kvd * c.capacity))
    return err("the KV cache does not have the fast runtime's layout");
  return s;
}

void kv_block_read(const KvCache& c, const KvBlockShape& s, int64_t block,
                   std::span<uint8_t> bytes) {
  const int64_t e = s.elem_bytes;
  for_each_run(s, c.capacity, block, [&](bool key, int64_t at, int64_t off, int64_t n) {
    const void* src = e == 2 ? static_cast<const void*>((key ? c.k16 : c.v16).data() + at)
                             : static_cast<const void*>((key ? c.k : c.v).data() + at);
    std::memcpy(bytes.data() + off * e, src, static_cast<size_t>(n * e));
  });
}

void kv_block_write(KvCache& c, const KvBlockShape& s, int64_t block,
                    std::span<const uint8_t> bytes) {
  const int64_t e = s.elem_bytes;
  for_each_run(s, c.capacity, block, [&](bool key, int64_t at, int64_t off, int64_t n) {
    void* dst = e == 2 ? static_cast<void*>((key ? c.k16 : c.v16).data() + at)
                       : static_cast<void*>((key ? c.k : c.v).data() + at);
    std::memcpy(dst, bytes.data() + off * e, static_cast<size_t>(n * e));
  });
}

}  // namespace tq
