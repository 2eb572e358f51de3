#include "serve/responses.h"

namespace tq::serve {
namespace {

nlohmann::json head_json(const ResponseHead& h, const char* chat_object,
                         const char* completion_object) {
  return {{"id", h.id},
          {"object", h.endpoint == Endpoint::kChat ? chat_object : completion_object},
          {"created", h.created},
          {"model", h.model}};
}

}  // namespace

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", 0}}}};
}

nlohmann::json timings_json(const JobTimings& t) {
  return {{"queue_ms", t.queue_ms},
          {"prefill_ms", t.prefill_ms},
          {"decode_ms", t.decode_ms},
          {"ttft_ms", t.ttft_ms}};
}

nlohmann::json completion_body(const ResponseHead& h, const std::vector<ChoiceResult>& choices,
                               int64_t prompt_tokens, const JobOutput& out) {
  nlohmann::json j = head_json(h, "chat.completion", "text_completion");
  j["choices"] = nlohmann::json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    nlohmann::json choice = {{"index", i}};
    if (h.endpoint == Endpoint::kChat)
      choice["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
    else
      choice["text"] = choices[i].text;
    choice["logprobs"] = choices[i].logprobs;
    choice["finish_reason"] = choices[i].finish_reason;
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = usage_json(prompt_tokens, out.completion_tokens);
  j["timings"] = timings_json(out.timings);
  return j;
}

nlohmann::json chunk_body(const ResponseHead& h, int index, const std::string* text, bool first,
                          const std::string* finish_reason, const nlohmann::json* logprobs,
                          bool with_usage) {
  nlohmann::json j = head_json(h, "chat.completion.chunk", "text_completion");
  nlohmann::json choice = {{"index", index}};
  if (h.endpoint == Endpoint::kChat) {
    nlohmann::json delta = nlohmann::json::object();
    if (first) delta["role"] = "assistant";
    if (text != nullptr) delta["content"] = *text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text != nullptr ? *text : "";
  }
  choice["logprobs"] = logprobs != nullptr ? *logprobs : nlohmann::json();
  choice["finish_reason"] = finish_reason ? nlohmann::json(*finish_reason) : nlohmann::json();
  j["choices"] = nlohmann::json::array({choice});
  if (with_usage) j["usage"] = nullptr;
  return j;
}

nlohmann::json usage_chunk_body(const ResponseHead& h, int64_t prompt_tokens,
                                const JobOutput& out) {
  nlohmann::json j = head_json(h, "chat.completion.chunk", "text_completion");
  j["choices"] = nlohmann::json::array();
  j["usage"] = usage_json(prompt_tokens, out.completion_tokens);
  j["timings"] = timings_json(out.timings);
  return j;
}

std::string sse_event(const nlohmann::json& j) {
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace tq::serve
