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
    : net_(net), tok_(tok), max_len_(max_len), recurrent_(!net.new_cache(0).conv.empty()) {}

Status ChoiceScorer::ensure_capacity(Lane& l, int64_t n) {
  if (l.cache.capacity >= n) return ok_status();
  // Grown by doubling, so a long item does not make every short one pay for its cache.
  int64_t cap = std::max<int64_t>(1024, l.cache.capacity);
  while (cap < n) cap *= 2;
  l.cache = net_.new_cache(std::min(cap, std::max(n, max_len_)));
  l.cached.clear();
  return ok_status();
}

size_t ChoiceScorer::rewind(Lane& l, const std::vector<int32_t>& ctx) {
  const bool recurrent = !l.cache.conv.empty();
  size_t common = 0;
  if (!recurrent)  // a recurrent state cannot go back to an earlier position
    while (common < l.cached.size() && common < ctx.size() && l.cached[common] == ctx[common])
      ++common;
  common = std::min(common, ctx.size() - 1);  // the last context token's logits are needed
  if (recurrent) l.cache.clear();
  l.cache.n = int64_t(common);
  l.last.resize(size_t(net_.config().vocab_size));
  return common;
}

Status ChoiceScorer::prefill(Lane& l, const std::vector<int32_t>& ctx) {
  const size_t common = rewind(l, ctx);
  std::span<const int32_t> fresh(ctx.data() + common, ctx.size() - common);
  TQ_CHECK_OK(net_.forward(fresh, l.cache, l.last, /*all_logits=*/false));
  fed_ += int64_t(fresh.size());
  l.cached = ctx;
  if (!l.cache.conv.empty()) l.conv = l.cache.conv, l.ssm = l.cache.ssm;
  return ok_status();
}

Result<EncodedPair> ChoiceScorer::encode(const LlRequest& r) const {
  const int64_t vocab = net_.config().vocab_size;
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
  return p;
}

Result<ContinuationScore> ChoiceScorer::continue_from(Lane& l, const EncodedPair& p) {
  const size_t V = size_t(net_.config().vocab_size);
  ContinuationScore s;
  s.tokens = int64_t(p.continuation.size());
  s.ll = -token_nll(l.last, p.continuation[0]);
  s.greedy = argmax(l.last) == p.continuation[0];
  if (p.continuation.size() > 1) {
    const size_t m = p.continuation.size() - 1;
    rows_.resize(m * V);
    TQ_CHECK_OK(
        net_.forward(std::span<const int32_t>(p.continuation.data(), m), l.cache, rows_, true));
    fed_ += int64_t(m);
    for (size_t t = 0; t < m; ++t) {
      std::span<const float> row(rows_.data() + t * V, V);
      s.ll -= token_nll(row, p.continuation[t + 1]);
      s.greedy = s.greedy && argmax(row) == p.continuation[t + 1];
    }
    // Back to the end of the context for the next choice.
    l.cache.n = int64_t(l.cached.size());
    if (!l.conv.empty()) l.cache.conv = l.conv, l.cache.ssm = l.ssm;
  }
  return s;
}

Result<std::vector<ContinuationScore>> ChoiceScorer::score(std::span<const LlRequest> reqs) {
  std::vector<EncodedPair> pairs;
  for (const LlRequest& r : reqs) {
    TQ_TRY(EncodedPair p, encode(r));
    pairs.push_back(std::move(p));
  }
  return score_pairs(lanes_[0], pairs);
}

Result<std::vector<ContinuationScore>> ChoiceScorer::score_pairs(
    Lane& l, const std::vector<EncodedPair>& pairs) {
  std::vector<ContinuationScore> out;
  for (const EncodedPair& p : pairs) {
    TQ_CHECK_OK(ensure_capacity(l, int64_t(p.context.size() + p.continuation.size())));
    if (p.context != l.cached || l.cache.n != int64_t(l.cached.size())) {
      TQ_CHECK_OK(prefill(l, p.context));
    }
    TQ_TRY(ContinuationScore s, continue_from(l, p));
    out.push_back(s);
  }
  return out;
}

Result<std::vector<std::vector<ContinuationScore>>> ChoiceScorer::score_items(
    std::span<const std::span<const LlRequest>> items, int lanes) {
  std::vector<std::vector<ContinuationScore>> out;
  lanes = recurrent_ ? 1 : std::max(1, lanes);
  if (int(lanes_.size()) < lanes) lanes_.resize(size_t(lanes));
  for (size_t i0 = 0; i0 < items.size(); i0 += size_t(lanes)) {
    const size_t n = std::min(items.size() - i0, size_t(lanes));
    // Each item's pairs; an item whose requests do not share one context is scored request by
    // request on lane 0 (its own lane's item, if any, is done by then).
    std::vector<std::vector<EncodedPair>> pairs(n);
    std::vector<bool> shared(n, true);
    std::vector<SeqStep> steps;
    for (size_t j = 0; j < n; ++j) {
      for (const LlRequest& r : items[i0 + j]) {
        TQ_TRY(EncodedPair p, encode(r));
        pairs[j].push_back(std::move(p));
      }
      for (const EncodedPair& p : pairs[j])
        shared[j] = shared[j] && p.context == pairs[j][0].context;
      if (!shared[j] || pairs[j].empty()) continue;
      Lane& l = lanes_[j];
      int64_t need = 0;
      for (const EncodedPair& p : pairs[j])
        need = std::max(need, int64_t(p.context.size() + p.continuation.size()));
      TQ_CHECK_OK(ensure_capacity(l, need));
      const std::vector<int32_t>& ctx = pairs[j][0].context;
      if (ctx == l.cached && l.cache.n == int64_t(l.cached.size())) continue;
      const size_t common = rewind(l, ctx);
      l.cached = ctx;
      SeqStep st;
      st.tokens = std::span<const int32_t>(l.cached.data() + common, l.cached.size() - common);
      st.cache = &l.cache;
      st.logits = l.last;
      steps.push_back(st);
    }
    if (!steps.empty()) TQ_CHECK_OK(net_.forward_batch(steps));
    for (const SeqStep& st : steps) fed_ += int64_t(st.tokens.size());
    for (size_t j = 0; j < n; ++j) {
      std::vector<ContinuationScore> scores;
      if (!shared[j]) {
        TQ_TRY(scores, score_pairs(lanes_[0], pairs[j]));
      } else {
        for (const EncodedPair& p : pairs[j]) {
          TQ_TRY(ContinuationScore s, continue_from(lanes_[j], p));
          scores.push_back(s);
        }
      }
      out.push_back(std::move(scores));
    }
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
  Lane& l = lanes_[0];
  TQ_CHECK_OK(ensure_capacity(l, int64_t(prompt.size()) + o.max_tokens));
  TQ_CHECK_OK(prefill(l, prompt));
  Generation gen(tok_, o);
  std::string text;
  for (;;) {
    const int32_t next = gen.sample(l.last);
    text += gen.accept(next);
    if (gen.finish() != Finish::kNone) break;
    const int32_t one[1] = {next};
    TQ_CHECK_OK(net_.forward(one, l.cache, l.last, false));
    ++fed_;
  }
  // The cache now holds generated tokens past the prompt: the next prefill reuses the prompt only.
  return text;
}

}  // namespace tq::eval
