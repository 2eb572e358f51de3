// The body of POST /v1/chat/completions and /v1/completions, parsed and checked before anything
// runs: every field OpenAI defines is either honoured, or refused with a 400 naming it; a field
// nobody defines is refused too. Depends only on JSON, so the fuzzer can take it alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/sampling.h"
#include "serve/api_error.h"

namespace tq::serve {

enum class Endpoint : uint8_t { kChat, kCompletion };

inline constexpr int kMaxStops = 4;
inline constexpr size_t kMaxStopBytes = 512;
inline constexpr int kMaxChoices = 8;       // `n`
inline constexpr int kMaxTopLogprobs = 20;  // `top_logprobs` / completions' `logprobs`
inline constexpr int64_t kMaxTokensLimit = int64_t{1} << 31;  // beyond any context

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::optional<std::string> model;
  nlohmann::ordered_json messages;  // chat: [{role, content: string}], parts joined
  std::string prompt_text;          // completions: the prompt as text ...
  std::vector<int32_t> prompt_ids;  // ... or as token ids (prompt_is_ids)
  bool prompt_is_ids = false;
  std::optional<int64_t> max_tokens;  // a ceiling; absent: up to the context
  SamplingOptions sampling;           // temperature defaults to 1, as OpenAI
  bool seeded = false;                // `seed` given (else the server draws one)
  LogitAdjust adjust;                 // logit_bias ids checked against the vocabulary later
  std::vector<std::string> stop;
  nlohmann::ordered_json tools;   // chat: the tools as given (null: none)
  bool tool_choice_none = false;  // tool_choice "none": no calls are parsed out of the answer
  int n = 1;                      // choices (up to kMaxChoices), sharing one prefill
  int top_logprobs = -1;          // -1: no log-probabilities; else the alternatives per token
  bool echo = false;              // completions: the prompt's text before the completion
  bool ignore_eos = false;        // vLLM's and llama.cpp's extension: end tokens do not end it
  bool stream = false;
  bool include_usage = false;
};

// Parses a request body. Errors: invalid_json, invalid_type, invalid_value,
// missing_required_parameter, unsupported_parameter (defined by OpenAI, not done here yet),
// unknown_parameter; each names its field in `param` (messages[1].content, stop[2], ...).
std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   Endpoint endpoint);

// The body of POST /tokenize ({"content": string, "add_special": bool}) and /detokenize
// ({"tokens": [ids]}).
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
};
std::variant<TokenizeRequest, ApiError> parse_tokenize_request(std::string_view body);
std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(std::string_view body);

}  // namespace tq::serve
