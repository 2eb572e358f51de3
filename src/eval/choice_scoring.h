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
  // Greedy (or as `o` says) generation after `prompt`, which reuses the cached prefix the same
  // way (GSM8K's few-shot block); returns the text generated, stop strings excluded.
  Result<std::string> generate(std::vector<int32_t> prompt, const GenerationOptions& o);
  int64_t tokens_fed() const { return fed_; }

 private:
  Status prefill(const std::vector<int32_t>& ctx);
  Status ensure_capacity(int64_t n);
  const Transformer& net_;
  const Tokenizer& tok_;
  int64_t max_len_;
  KvCache cache_;
  std::vector<int32_t> cached_;     // the tokens whose keys and values cache_ holds
  std::vector<float> last_, rows_;  // logits after the context; rows of a continuation
  std::vector<float> conv_, ssm_;   // recurrent state after the context (qwen3_5)
  int64_t fed_ = 0;
};

}  // namespace tq::eval
