// Transformer: checks a model and the arguments of every call, and hands them to the runtime
// RuntimeOptions pick (model/runtime.h).
#include "model/forward.h"

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
    TQ_TRY(t->impl_->rt, load_reference_runtime(src, std::move(progress)));
  } else {
    TQ_TRY(t->impl_->rt,
           load_fast_runtime(src, opts, std::move(inv).value(), std::move(progress)));
  }
  return t;
}

std::string Transformer::runtime_name() const { return impl_->rt->name(); }
int Transformer::threads() const { return impl_->rt->threads(); }
uint64_t Transformer::bytes_per_token() const { return impl_->rt->bytes_per_token(); }
KvCache Transformer::new_cache(int64_t capacity) const { return impl_->rt->new_cache(capacity); }

Status Transformer::forward(std::span<const int32_t> tokens, KvCache& cache,
                            std::span<float> logits, bool all_logits) const {
  const ModelConfig& c = impl_->cfg;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = c.vocab_size, cap = cache.capacity, p0 = cache.n;
  if (n == 0) return err("forward: no tokens");
  if (cap < 0 || !impl_->rt->fits(cache))
    return err("forward: KV cache does not fit this model and runtime (make it with new_cache)");
  if (p0 < 0 || n > cap - p0)
    return err("forward: {} cached + {} new positions exceed the KV cache capacity {}", p0, n, cap);
  const int64_t out_rows = all_logits ? n : 1;
  if (static_cast<int64_t>(logits.size()) < out_rows * vocab)
    return err("forward: logits buffer holds {} floats, {} rows x vocab {} needed", logits.size(),
               out_rows, vocab);
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return err("forward: token id {} at index {} outside the vocabulary [0, {})", tokens[i], i,
                 vocab);
  return impl_->rt->forward(tokens, cache, logits, all_logits);
}

}  // namespace tq
