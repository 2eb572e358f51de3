#include "eval/choice_scoring.h"

#include <algorithm>

#include "eval/token_metrics.h"

namespace tq::eval {

EncodedPair encode_pair(const Tokenizer& tok, const LlRequest& r) {
  std::string ctx = r.context, cont = r.continuation;
  size_t keep = ctx.find_last_not_of(" \t\n\r\v\f");
  keep = keep == std::string::npos ? 0 : keep + 1;
  cont = ctx.substr(keep) + cont;
  ctx.resize(keep);
  EncodedPair p;
  p.context = tok.encode(ctx, false);
  std::vector<int32_t> whole = tok.encode(ctx + cont, false);
  if (whole.size() > p.context.size())
    p.continuation.assign(whole.begin() + std::ptrdiff_t(p.context.size()), whole.end());
  return p;
}

ChoiceScorer::ChoiceScorer(const Transformer& net, const Tokenizer& tok, int64_t max_len)
    : net_(net), tok_(tok), max_len_(max_len) {}

Status ChoiceScorer::ensure_capacity(int64_t n) {
  if (cache_.capacity >= n) return ok_status();
  // Grown by doubling, so a long item does not make every short one pay for its cache.
  int64_t cap = std::max<int64_t>(1024, cache_.capacity);
  while (cap < n) cap *= 2;
  cache_ = net_.new_cache(std::min(cap, std::max(n, max_len_)));
  cached_.clear();
  return ok_status();
}

Status ChoiceScorer::prefill(const std::vector<int32_t>& ctx) {
  const bool recurrent = !cache_.conv.empty();
  size_t common = 0;
  if (!recurrent)  // a recurrent state cannot go back to an earlier position
    while (common < cached_.size() && common < ctx.size() && cached_[common] == ctx[common])
      ++common;
  common = std::min(common, ctx.size() - 1);  // the last context token's logits are needed
  if (recurrent) cache_.clear();
  cache_.n = int64_t(common);
  const size_t V = size_t(net_.config().vocab_size);
  last_.resize(V);
  std::span<const int32_t> fresh(ctx.data() + common, ctx.size() - common);
  TQ_CHECK_OK(net_.forward(fresh, cache_, last_, /*all_logits=*/false));
  fed_ += int64_t(fresh.size());
  cached_ = ctx;
  if (recurrent) conv_ = cache_.conv, ssm_ = cache_.ssm;
  return ok_status();
}

Result<std::vector<ContinuationScore>> ChoiceScorer::score(std::span<const LlRequest> reqs) {
  std::vector<ContinuationScore> out;
  const int64_t vocab = net_.config().vocab_size;
  const size_t V = size_t(vocab);
  for (const LlRequest& r : reqs) {
    EncodedPair p = encode_pair(tok_, r);
    if (p.continuation.empty())
      return err("a continuation tokenizes to nothing: '{}'", r.continuation);
    if (p.context.empty()) return err("a context tokenizes to nothing");
    // As the harness: (context + continuation)[-(max_len + 1):][:-1] is what the model sees.
    const int64_t total = int64_t(p.context.size() + p.continuation.size());
    if (total > max_len_ + 1) {
      const int64_t drop = total - (max_len_ + 1);
      if (drop >= int64_t(p.context.size()))
        return err("a continuation is longer than the model's context");
      p.context.erase(p.context.begin(), p.context.begin() + drop);
    }
    for (int32_t id : p.context)
      if (id < 0 || id >= vocab) return err("token id {} outside the vocabulary of {}", id, vocab);
    for (int32_t id : p.continuation)
      if (id < 0 || id >= vocab) return err("token id {} outside the vocabulary of {}", id, vocab);
    TQ_CHECK_OK(ensure_capacity(total));
    if (p.context != cached_ || cache_.n != int64_t(cached_.size())) {
      TQ_CHECK_OK(prefill(p.context));
    }
    ContinuationScore s;
    s.tokens = int64_t(p.continuation.size());
    s.ll = -token_nll(last_, p.continuation[0]);
    s.greedy = argmax(last_) == p.continuation[0];
    if (p.continuation.size() > 1) {
      const size_t m = p.continuation.size() - 1;
      rows_.resize(m * V);
      TQ_CHECK_OK(
          net_.forward(std::span<const int32_t>(p.continuation.data(), m), cache_, rows_, true));
      fed_ += int64_t(m);
      for (size_t t = 0; t < m; ++t) {
        std::span<const float> row(rows_.data() + t * V, V);
        s.ll -= token_nll(row, p.continuation[t + 1]);
        s.greedy = s.greedy && argmax(row) == p.continuation[t + 1];
      }
      // Back to the end of the context for the next choice.
      cache_.n = int64_t(cached_.size());
      if (!conv_.empty()) cache_.conv = conv_, cache_.ssm = ssm_;
    }
    out.push_back(s);
  }
  return out;
}

Result<std::string> ChoiceScorer::generate(std::vector<int32_t> prompt,
                                           const GenerationOptions& o) {
  const int64_t vocab = net_.config().vocab_size;
  if (prompt.empty()) return err("a prompt tokenizes to nothing");
  for (int32_t id : prompt)
    if (id < 0 || id >= vocab) return err("token id {} outside the vocabulary of {}", id, vocab);
  // As the harness: the prompt keeps its last max_len - max_tokens tokens.
  const int64_t room = std::max<int64_t>(1, max_len_ - o.max_tokens);
  if (int64_t(prompt.size()) > room)
    prompt.erase(prompt.begin(), prompt.end() - std::ptrdiff_t(room));
  TQ_CHECK_OK(ensure_capacity(int64_t(prompt.size()) + o.max_tokens));
  TQ_CHECK_OK(prefill(prompt));
  Generation gen(tok_, o);
  std::string text;
  for (;;) {
    const int32_t next = gen.sample(last_);
    text += gen.accept(next);
    if (gen.finish() != Finish::kNone) break;
    const int32_t one[1] = {next};
    TQ_CHECK_OK(net_.forward(one, cache_, last_, false));
    ++fed_;
  }
  // The cache now holds generated tokens past the prompt: the next prefill reuses the prompt only.
  return text;
}

}  // namespace tq::eval
