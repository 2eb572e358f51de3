// Log-likelihood of continuations as lm-evaluation-harness computes it, with the shared context
// fed once: a request's context is prefilled only past the longest prefix it shares with the
// tokens already in the KV cache (the few-shot block, the other choices of an item), and each
// continuation is scored from there.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"
#include "eval/task_items.h"
#include "model/forward.h"
#include "model/generation.h"
#include "text/tokenizer.h"

namespace tq::eval {

struct ContinuationScore {
  double ll = 0;        // sum of log p over the continuation's tokens
  bool greedy = false;  // every continuation token is the argmax
  int64_t tokens = 0;
};

// The harness's _encode_pair: trailing spaces of the context move to the continuation; the
// context is tokenized alone and the continuation is what the whole adds after it.
struct EncodedPair {
  std::vector<int32_t> context, continuation;
};
EncodedPair encode_pair(const Tokenizer& tok, const LlRequest& r);

class ChoiceScorer {
 public:
  // `max_len`: the longest input (the harness left-truncates context + continuation to it).
  ChoiceScorer(const Transformer& net, const Tokenizer& tok, int64_t max_len);
  // One score per request, in order.
  Result<std::vector<ContinuationScore>> score(std::span<const LlRequest> reqs);
  // Several items' requests (an item: requests sharing one context), scored as score() scores
  // each: up to `lanes` items' contexts are prefilled side by side in one forward_batch (each
  // lane keeps its own cache and reused prefix), so each product reads its weights once for all
  // of them; their continuations then run lane by lane.
  Result<std::vector<std::vector<ContinuationScore>>> score_items(
      std::span<const std::span<const LlRequest>> items, int lanes);
  // Greedy (or as `o` says) generation after `prompt`, which reuses the cached prefix the same
  // way (GSM8K's few-shot block); returns the text generated, stop strings excluded.
  Result<std::string> generate(std::vector<int32_t> prompt, const GenerationOptions& o);
  int64_t tokens_fed() const { return fed_; }

 private:
  // One cache with the tokens it holds; lane 0 serves score() and generate().
  struct Lane {
    KvCache cache;
    std::vector<int32_t> cached;   // the tokens whose keys and values cache holds
    std::vector<float> last;       // logits after the context
    std::vector<float> conv, ssm;  // recurrent state after the context (qwen3_5)
  };
  // A request's pair, truncated as the harness truncates, its ids checked.
  Result<EncodedPair> encode(const LlRequest& r) const;
  // Where lane l's context `ctx` must start feeding (after the prefix its cache shares), the
  // cache rewound there; the last context token is always fed (its logits are needed).
  size_t rewind(Lane& l, const std::vector<int32_t>& ctx);
  Status prefill(Lane& l, const std::vector<int32_t>& ctx);
  Status ensure_capacity(Lane& l, int64_t n);
  // Each pair scored on lane l in turn, its context prefilled where the lane lacks it.
  Result<std::vector<ContinuationScore>> score_pairs(Lane& l,
                                                     const std::vector<EncodedPair>& pairs);
  // Scores p's continuation from the context lane l holds, then rewinds to it.
  Result<ContinuationScore> continue_from(Lane& l, const EncodedPair& p);
  const Transformer& net_;
  const Tokenizer& tok_;
  int64_t max_len_;
  bool recurrent_;  // qwen3_5: a state that cannot rewind, so one lane and whole contexts
  std::vector<Lane> lanes_ = std::vector<Lane>(1);
  std::vector<float> rows_;  // logits of a continuation's rows
  int64_t fed_ = 0;
};

}  // namespace tq::eval
