// The reference runtime: F32Model's weights, the f32 layer step, a row-major f32 KV cache.
#include <algorithm>

#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "model/f32_model.h"
#include "model/runtime.h"

namespace tq {

namespace {

class ReferenceRuntime final : public Runtime {
 public:
  explicit ReferenceRuntime(std::unique_ptr<F32Model> m) : m_(std::move(m)) {}

  // One sequence after the other: the reference is for checking, not throughput.
  Status forward(std::span<const SeqStep> seqs) const override {
    for (const SeqStep& s : seqs) one(s.tokens, *s.cache, s.logits, s.all_logits);
    return ok_status();
  }

  void one(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits,
           bool all_logits) const {
    const ModelConfig& c = m_->config();
    const int64_t n = static_cast<int64_t>(tokens.size()), d = c.hidden_size;
    const int64_t kvd = c.num_key_value_heads * c.head_dim, cap = cache.capacity;
    std::vector<float> x(static_cast<size_t>(n * d));  // [n, d] residual stream
    m_->embed(tokens, x.data());
    F32Buffers buf;
    F32Io io = buf.bind(c, m_->inv_freq(), x.data(), n, 1, cache.n);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      // This layer's keys/values [cap, kvd]; qkv writes the new rows straight into the cache.
      io.k = cache.k.data() + l * cap * kvd;
      io.v = cache.v.data() + l * cap * kvd;
      m_->step().run(m_->tensors().layers[static_cast<size_t>(l)], io);
    }
    cache.n += n;
    const int64_t out_rows = all_logits ? n : 1;
    m_->head(x.data() + (n - out_rows) * d, out_rows, logits.data());
  }

  KvCache new_cache(int64_t capacity) const override {
    KvCache kv;
    kv.capacity = std::max<int64_t>(capacity, 0);
    kv.k.assign(cache_size(kv.capacity), 0.0f);
    kv.v.assign(cache_size(kv.capacity), 0.0f);
    return kv;
  }

  bool fits(const KvCache& kv) const override {
    return kv.capacity >= 0 && kv.layout == KvLayout::kRows &&
           kv.k.size() == cache_size(kv.capacity) && kv.v.size() == cache_size(kv.capacity);
  }

  std::string name() const override { return "reference (" + blas_backend() + ")"; }
  int threads() const override { return ThreadPool::hardware_threads(); }

  uint64_t bytes_per_token() const override {
    const F32Tensors& t = m_->tensors();
    uint64_t b = (t.head().size() + static_cast<uint64_t>(m_->config().hidden_size));
    for (const F32Layer& L : t.layers)
      b += L.q.size() + L.k.size() + L.v.size() + L.o.size() + L.gate.size() + L.up.size() +
           L.down.size();
    return b * sizeof(float);
  }

 private:
  size_t cache_size(int64_t capacity) const {
    const ModelConfig& c = m_->config();
    return static_cast<size_t>(c.num_hidden_layers * capacity * c.num_key_value_heads * c.head_dim);
  }
  std::unique_ptr<F32Model> m_;
};

}  // namespace

Result<std::unique_ptr<Runtime>> load_reference_runtime(const ModelSource& src,
                                                        LoadProgress progress) {
  TQ_TRY(std::unique_ptr<F32Model> m, F32Model::load(src, std::move(progress)));
  return std::unique_ptr<Runtime>(new ReferenceRuntime(std::move(m)));
}

}  // namespace tq
