// The JSON bodies of OpenAI's chat.completion, text_completion and their stream chunks, with
// `usage` and our `timings` object.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/job.h"
#include "serve/request.h"
#include "serve/tool_calls.h"

namespace tq::serve {

// What every body of one response shares.
struct ResponseHead {
  std::string id;
  std::string model;
  int64_t created = 0;  // Unix seconds
  Endpoint endpoint = Endpoint::kChat;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens,
                          int64_t cached_tokens = 0);
nlohmann::json timings_json(const JobTimings& t);

// One choice of a response that did not stream.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;
  nlohmann::json logprobs;    // null when not asked
  nlohmann::json tool_calls;  // chat: OpenAI's tool_calls array, null when none
};

// The whole response of a request that did not stream.
nlohmann::json completion_body(const ResponseHead& h, const std::vector<ChoiceResult>& choices,
                               int64_t prompt_tokens, const JobOutput& out);

// What one stream chunk of one choice carries (null pointers: absent).
struct ChunkDelta {
  int index = 0;
  bool first = false;  // chat: the role
  const std::string* text = nullptr;
  const nlohmann::json* tool_calls = nullptr;  // chat: [{index, id, type, function}]
  const nlohmann::json* logprobs = nullptr;
  const std::string* finish_reason = nullptr;
};

// One stream chunk. Chat: text in the delta's `content`; completions: in `text`. with_usage
// adds "usage": null (the client asked for a final usage chunk).
nlohmann::json chunk_body(const ResponseHead& h, const ChunkDelta& d, bool with_usage);
// OpenAI's tool_calls array for `calls`, numbered from first_index; ids "call_<job>_<choice>_<k>".
// Streamed, each entry also carries its "index".
nlohmann::json tool_calls_json(std::span<const ToolCall> calls, const std::string& job_id,
                               int choice, int first_index, bool stream);

// The final usage chunk (no choices), with timings.
nlohmann::json usage_chunk_body(const ResponseHead& h, int64_t prompt_tokens, const JobOutput& out);

// "data: {json}\n\n" (invalid UTF-8 replaced, which should never happen).
std::string sse_event(const nlohmann::json& j);

}  // namespace tq::serve
