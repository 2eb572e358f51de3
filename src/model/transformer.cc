// Transformer: checks a model and the arguments of every call, and hands them to the runtime
// RuntimeOptions pick (model/runtime.h).
#include "model/forward.h"

#include <fmt/format.h>

#include "model/layer.h"
#include "model/rope.h"
#include "model/runtime.h"

namespace tq {

struct Transformer::Impl {
  ModelConfig cfg;
  std::unique_ptr<Runtime> rt;
};

Transformer::Transformer() : impl_(std::make_unique<Impl>()) {}
Transformer::~Transformer() = default;

const ModelConfig& Transformer::config() const { return impl_->cfg; }

Result<std::unique_ptr<Transformer>> Transformer::load(
    const ModelSource& src, const RuntimeOptions& opts,
    std::function<void(int64_t, int64_t)> progress) {
  if (!src.tensors) return err("{}: model has no tensor source", src.path);
  if (Status st = check_geometry(src.config); !st.ok())
    return err("{}: {}", src.path, st.error().message);
  auto inv = rope_inv_freq(src.config);
  if (!inv.ok()) return err("{}: {}", src.path, inv.error().message);
  std::unique_ptr<Transformer> t(new Transformer());
  t->impl_->cfg = src.config;
  if (opts.reference) {
    TQ_TRY(t->impl_->rt, load_reference_runtime(src, opts, std::move(progress)));
  } else {
    TQ_TRY(t->impl_->rt, load_fast_runtime(src, opts, std::move(inv).value(), std::move(progress)));
  }
  return t;
}

std::string Transformer::runtime_name() const { return impl_->rt->name(); }
int Transformer::threads() const { return impl_->rt->threads(); }
uint64_t Transformer::bytes_per_token() const { return impl_->rt->bytes_per_token(); }
KvCache Transformer::new_cache(int64_t capacity) const { return impl_->rt->new_cache(capacity); }

Status Transformer::forward(std::span<const int32_t> tokens, KvCache& cache,
                            std::span<float> logits, bool all_logits) const {
  const SeqStep one{tokens, &cache, logits, all_logits};
  return forward_batch({&one, 1});
}

Status Transformer::forward_batch(std::span<const SeqStep> seqs) const {
  const int64_t vocab = impl_->cfg.vocab_size;
  if (seqs.empty()) return err("forward: no sequences");
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SeqStep& q = seqs[s];
    const std::string who = seqs.size() > 1 ? fmt::format("sequence {}: ", s) : "";
    const int64_t n = static_cast<int64_t>(q.tokens.size());
    if (n == 0) return err("forward: {}no tokens", who);
    if (q.cache == nullptr || q.cache->capacity < 0 || !impl_->rt->fits(*q.cache))
      return err(
          "forward: {}KV cache does not fit this model and runtime (make it with "
          "new_cache)",
          who);
    for (size_t o = 0; o < s; ++o)
      if (seqs[o].cache == q.cache) return err("forward: sequences {} and {} share a cache", o, s);
    const int64_t cap = q.cache->capacity, p0 = q.cache->n;
    if (p0 < 0 || n > cap - p0)
      return err("forward: {}{} cached + {} new positions exceed the KV cache capacity {}", who, p0,
                 n, cap);
    const int64_t out_rows = q.all_logits ? n : 1, d = impl_->cfg.hidden_size;
    if (static_cast<int64_t>(q.logits.size()) < out_rows * vocab)
      return err("forward: {}logits buffer holds {} floats, {} rows x vocab {} needed", who,
                 q.logits.size(), out_rows, vocab);
    if (!q.hidden.empty() && static_cast<int64_t>(q.hidden.size()) < out_rows * d)
      return err("forward: {}hidden buffer holds {} floats, {} rows x hidden {} needed", who,
                 q.hidden.size(), out_rows, d);
    for (int64_t i = 0; i < n; ++i)
      if (q.tokens[i] < 0 || q.tokens[i] >= vocab)
        return err("forward: {}token id {} at index {} outside the vocabulary [0, {})", who,
                   q.tokens[i], i, vocab);
  }
  return impl_->rt->forward(seqs);
}

}  // namespace tq

namespace tq {

bool Transformer::has_mtp() const { return impl_->rt->has_mtp(); }

KvCache Transformer::new_mtp_cache(int64_t capacity) const {
  return impl_->rt->new_mtp_cache(capacity);
}

Status Transformer::mtp_forward(std::span<const float> hidden, std::span<const int32_t> next_tokens,
                                KvCache& cache, std::span<float> logits) const {
  const ModelConfig& c = impl_->cfg;
  const int64_t n = static_cast<int64_t>(next_tokens.size());
  if (!impl_->rt->has_mtp())
    return err("mtp_forward: no MTP head loaded (RuntimeOptions::mtp, qwen3_5 only)");
  if (n == 0) return err("mtp_forward: no tokens");
  if (cache.capacity < 0 || !impl_->rt->fits_mtp(cache))
    return err("mtp_forward: cache does not fit this MTP head (make it with new_mtp_cache)");
  if (cache.n < 0 || n > cache.capacity - cache.n)
    return err("mtp_forward: {} cached + {} new positions exceed the cache capacity {}", cache.n, n,
               cache.capacity);
  if (static_cast<int64_t>(hidden.size()) < n * c.hidden_size)
    return err("mtp_forward: hidden holds {} floats, {} rows x hidden {} needed", hidden.size(), n,
               c.hidden_size);
  if (static_cast<int64_t>(logits.size()) < n * c.vocab_size)
    return err("mtp_forward: logits buffer holds {} floats, {} rows x vocab {} needed",
               logits.size(), n, c.vocab_size);
  for (int64_t i = 0; i < n; ++i)
    if (next_tokens[i] < 0 || next_tokens[i] >= c.vocab_size)
      return err("mtp_forward: token id {} at index {} outside the vocabulary [0, {})",
                 next_tokens[i], i, c.vocab_size);
  return impl_->rt->mtp_forward(hidden, next_tokens, cache, logits);
}

}  // namespace tq
