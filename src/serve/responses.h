// The JSON bodies of OpenAI's chat.completion, text_completion and their stream chunks, with
// `usage` and our `timings` object.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/job.h"
#include "serve/request.h"

namespace tq::serve {

// What every body of one response shares.
struct ResponseHead {
  std::string id;
  std::string model;
  int64_t created = 0;  // Unix seconds
  Endpoint endpoint = Endpoint::kChat;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
nlohmann::json timings_json(const JobTimings& t);

// One choice of a response that did not stream.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;
  nlohmann::json logprobs;  // null when not asked
};

// The whole response of a request that did not stream.
nlohmann::json completion_body(const ResponseHead& h, const std::vector<ChoiceResult>& choices,
                               int64_t prompt_tokens, const JobOutput& out);

// One stream chunk of choice `index`. Chat: the first carries the role; text in `content`; the
// last one an empty delta and the finish reason. Completions: text in `text`. with_usage adds
// "usage": null (the client asked for a final usage chunk).
nlohmann::json chunk_body(const ResponseHead& h, int index, const std::string* text, bool first,
                          const std::string* finish_reason, const nlohmann::json* logprobs,
                          bool with_usage);
// The final usage chunk (no choices), with timings.
nlohmann::json usage_chunk_body(const ResponseHead& h, int64_t prompt_tokens, const JobOutput& out);

// "data: {json}\n\n" (invalid UTF-8 replaced, which should never happen).
std::string sse_event(const nlohmann::json& j);

}  // namespace tq::serve
