// The reference runtime: F32Model's weights, the f32 layer step, a row-major f32 KV cache
// (qwen3_5: keys and values of the full-attention layers, the DeltaNet layers' states).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/f32_model.h"
#include "model/mtp.h"
#include "model/runtime.h"

namespace tq {

namespace {

class ReferenceRuntime final : public Runtime {
 public:
  explicit ReferenceRuntime(std::unique_ptr<F32Model> m) : m_(std::move(m)) {
    const ModelConfig& c = m_->config();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      slot_.push_back(c.linear_layer(l) ? n_linear_++ : n_full_++);
  }

  // One sequence after the other: the reference is for checking, not throughput.
  Status forward(std::span<const SeqStep> seqs) const override {
    for (const SeqStep& s : seqs) one(s.tokens, *s.cache, s.logits, s.all_logits, s.hidden);
    return ok_status();
  }

  void one(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits,
           bool all_logits, std::span<float> hidden) const {
    const ModelConfig& c = m_->config();
    const int64_t n = static_cast<int64_t>(tokens.size()), d = c.hidden_size;
    const int64_t kvd = c.num_key_value_heads * c.head_dim, cap = cache.capacity;
    const int64_t conv = conv_size(), ssm = ssm_size();
    std::vector<float> x(static_cast<size_t>(n * d));  // [n, d] residual stream
    m_->embed(tokens, x.data());
    F32Buffers buf;
    F32Io io = buf.bind(c, m_->inv_freq(), x.data(), n, 1, cache.n);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      // This layer's keys/values [cap, kvd]; qkv writes the new rows straight into the cache.
      // A DeltaNet layer's states instead.
      const int64_t slot = slot_[static_cast<size_t>(l)];
      if (c.linear_layer(l)) {
        io.conv_state = cache.conv.data() + slot * conv;
        io.ssm_state = cache.ssm.data() + slot * ssm;
      } else {
        io.k = cache.k.data() + slot * cap * kvd;
        io.v = cache.v.data() + slot * cap * kvd;
      }
      m_->step().run(m_->tensors().layers[static_cast<size_t>(l)], io);
    }
    cache.n += n;
    const int64_t out_rows = all_logits ? n : 1;
    if (!hidden.empty()) std::copy_n(x.data() + (n - out_rows) * d, out_rows * d, hidden.data());
    m_->head(x.data() + (n - out_rows) * d, out_rows, logits.data());
  }

  bool has_mtp() const override { return mtp_ != nullptr; }

  KvCache new_mtp_cache(int64_t capacity) const override {
    KvCache kv;
    kv.capacity = std::max<int64_t>(capacity, 0);
    kv.k.assign(mtp_cache_size(kv.capacity), 0.0f);
    kv.v.assign(mtp_cache_size(kv.capacity), 0.0f);
    return kv;
  }

  bool fits_mtp(const KvCache& kv) const override {
    return kv.capacity >= 0 && kv.layout == KvLayout::kRows &&
           kv.k.size() == mtp_cache_size(kv.capacity) &&
           kv.v.size() == mtp_cache_size(kv.capacity) && kv.conv.empty() && kv.ssm.empty();
  }

  // fc over [normed embedding | normed hidden], the one layer step, mtp.norm, the trunk's head.
  Status mtp_forward(std::span<const float> hidden, std::span<const int32_t> next_tokens,
                     KvCache& cache, std::span<float> logits) const override {
    const ModelConfig& c = m_->config();
    const int64_t n = static_cast<int64_t>(next_tokens.size()), d = c.hidden_size;
    const float eps = static_cast<float>(c.rms_norm_eps);
    std::vector<float> e(static_cast<size_t>(n * d)), in(static_cast<size_t>(2 * n * d));
    std::vector<float> x(static_cast<size_t>(n * d));  // [n, d] the MTP layer's residual stream
    m_->embed(next_tokens, e.data());
    mtp_fc_input(e.data(), hidden.data(), mtp_->norm_emb, mtp_->norm_hidden, n, d, eps, in.data());
    matmul_nt(in.data(), n, 2 * d, mtp_->fc.data(), d, nullptr, x.data());
    F32Buffers buf;
    F32Io io = buf.bind(c, m_->inv_freq(), x.data(), n, 1, cache.n, cache.k.data(), cache.v.data());
    m_->step().run(mtp_->layer, io);
    cache.n += n;
    rms_norm(x.data(), mtp_->norm_final.data(), n, d, eps, e.data());
    const std::span<const float> head = m_->weight(TensorRole::kLmHead, -1);
    matmul_nt(e.data(), n, d, head.data(), c.vocab_size, nullptr, logits.data());
    return ok_status();
  }

  Status load_mtp(const ModelSource& src) {
    ModelConfig cfg;
    TQ_TRY(std::unique_ptr<TensorSource> ts, open_mtp_source(src, &cfg));
    auto get = [&](const TensorSpec& s, std::vector<float>& dst) -> Status {
      TQ_TRY(FloatTensor f, ts->load_f32_compute(s.name));
      if (f.shape != s.shape)
        return err("{}: tensor '{}' has shape {}, the config implies {}", ts->path(), s.name,
                   shape_str(f.shape), shape_str(s.shape));
      dst = std::move(f.data);
      return ok_status();
    };
    auto m = std::make_unique<MtpTensors<std::vector<float>>>();
    TQ_CHECK_OK(load_mtp_tensors(cfg, *m, get));
    mtp_ = std::move(m);
    return ok_status();
  }

  KvCache new_cache(int64_t capacity) const override {
    KvCache kv;
    kv.capacity = std::max<int64_t>(capacity, 0);
    kv.k.assign(cache_size(kv.capacity), 0.0f);
    kv.v.assign(cache_size(kv.capacity), 0.0f);
    kv.conv.assign(static_cast<size_t>(n_linear_ * conv_size()), 0.0f);
    kv.ssm.assign(static_cast<size_t>(n_linear_ * ssm_size()), 0.0f);
    return kv;
  }

  bool fits(const KvCache& kv) const override {
    return kv.capacity >= 0 && kv.layout == KvLayout::kRows &&
           kv.k.size() == cache_size(kv.capacity) && kv.v.size() == cache_size(kv.capacity) &&
           kv.conv.size() == static_cast<size_t>(n_linear_ * conv_size()) &&
           kv.ssm.size() == static_cast<size_t>(n_linear_ * ssm_size());
  }

  std::string name() const override { return "reference (" + blas_backend() + ")"; }
  int threads() const override { return ThreadPool::hardware_threads(); }

  uint64_t bytes_per_token() const override {
    const F32Tensors& t = m_->tensors();
    uint64_t b = (t.head().size() + static_cast<uint64_t>(m_->config().hidden_size));
    for (const F32Layer& L : t.layers)
      b += L.q.size() + L.k.size() + L.v.size() + L.o.size() + L.gate.size() + L.up.size() +
           L.down.size() + L.lin_qkv.size() + L.lin_z.size() + L.lin_b.size() + L.lin_a.size() +
           L.lin_out.size();
    return b * sizeof(float);
  }

 private:
  size_t cache_size(int64_t capacity) const {
    const ModelConfig& c = m_->config();
    return static_cast<size_t>(n_full_ * capacity * c.num_key_value_heads * c.head_dim);
  }
  size_t mtp_cache_size(int64_t capacity) const {
    const ModelConfig& c = m_->config();
    return static_cast<size_t>(capacity * c.num_key_value_heads * c.head_dim);
  }
  int64_t conv_size() const {
    const ModelConfig& c = m_->config();
    return (c.linear_conv_kernel_dim - 1) * c.linear_conv_dim();
  }
  int64_t ssm_size() const {
    const ModelConfig& c = m_->config();
    return c.linear_num_value_heads * c.linear_value_head_dim * c.linear_key_head_dim;
  }
  std::unique_ptr<F32Model> m_;
  std::unique_ptr<MtpTensors<std::vector<float>>> mtp_;  // with RuntimeOptions::mtp
  std::vector<int64_t> slot_;  // a layer's index among the layers of its kind
  int64_t n_full_ = 0, n_linear_ = 0;
};

}  // namespace

Result<int64_t> delta_chunk_from_env() {
  const char* e = std::getenv("TQ_DELTA_CHUNK");
  if (e == nullptr || *e == '\0') return int64_t{32};
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  if (*end != '\0' || v < 0 || v > 4096)
    return err("TQ_DELTA_CHUNK='{}': not a chunk size in [0, 4096]", e);
  return int64_t{v};
}

Result<std::unique_ptr<Runtime>> load_reference_runtime(const ModelSource& src,
                                                        const RuntimeOptions& opts,
                                                        LoadProgress progress) {
  TQ_TRY(std::unique_ptr<F32Model> m, F32Model::load(src, std::move(progress)));
  TQ_TRY(const int64_t chunk, delta_chunk_from_env());
  m->set_delta_chunk(chunk, chunk);
  auto rt = std::make_unique<ReferenceRuntime>(std::move(m));
  if (opts.mtp) TQ_CHECK_OK(rt->load_mtp(src));
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace tq
