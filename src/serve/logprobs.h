// Log-probabilities of generated tokens as OpenAI reports them: the chosen token's and the k
// most probable at its position, under the model's raw logits (before temperature, penalties
// and logit_bias, as vLLM reports them by default); and their JSON in the chat and in the
// legacy completions shape.
#pragma once

#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/job.h"
#include "text/tokenizer.h"

namespace tq::serve {

// Log-softmax of `logits` at `id`, with the k most probable tokens (ties: lower id first).
TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int k);

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": null}.
nlohmann::json chat_logprobs_json(const Tokenizer& tok, std::span<const TokenLogprob> lps);
// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}; the
// offsets count bytes from `offset0` (the length of the text before these tokens).
nlohmann::json completion_logprobs_json(const Tokenizer& tok, std::span<const TokenLogprob> lps,
                                        size_t offset0);

}  // namespace tq::serve
