#include "serve/responses.h"

#include <fmt/format.h>

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

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

nlohmann::json timings_json(const JobTimings& t) {
  nlohmann::json j = {{"queue_ms", t.queue_ms},
                      {"prefill_ms", t.prefill_ms},
                      {"decode_ms", t.decode_ms},
                      {"ttft_ms", t.ttft_ms}};
  if (t.spec_steps > 0)
    j["speculation"] = {
        {"steps", t.spec_steps}, {"proposed", t.spec_proposed}, {"accepted", t.spec_accepted}};
  return j;
}

nlohmann::json completion_body(const ResponseHead& h, const std::vector<ChoiceResult>& choices,
                               int64_t prompt_tokens, const JobOutput& out) {
  nlohmann::json j = head_json(h, "chat.completion", "text_completion");
  j["choices"] = nlohmann::json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    nlohmann::json choice = {{"index", i}};
    if (h.endpoint == Endpoint::kChat) {
      const auto& c = choices[i];
      const bool calls = !c.tool_calls.is_null();
      choice["message"] = {
          {"role", "assistant"},
          {"content", calls && c.text.empty() ? nlohmann::json() : nlohmann::json(c.text)}};
      if (calls) choice["message"]["tool_calls"] = c.tool_calls;
    } else {
      choice["text"] = choices[i].text;
    }
    choice["logprobs"] = choices[i].logprobs;
    choice["finish_reason"] = choices[i].finish_reason;
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = usage_json(prompt_tokens, out.completion_tokens, out.cached_tokens);
  j["timings"] = timings_json(out.timings);
  return j;
}

nlohmann::json chunk_body(const ResponseHead& h, const ChunkDelta& d, bool with_usage) {
  nlohmann::json j = head_json(h, "chat.completion.chunk", "text_completion");
  nlohmann::json choice = {{"index", d.index}};
  if (h.endpoint == Endpoint::kChat) {
    nlohmann::json delta = nlohmann::json::object();
    if (d.first) delta["role"] = "assistant";
    if (d.text != nullptr) delta["content"] = *d.text;
    if (d.tool_calls != nullptr) delta["tool_calls"] = *d.tool_calls;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = d.text != nullptr ? *d.text : "";
  }
  choice["logprobs"] = d.logprobs != nullptr ? *d.logprobs : nlohmann::json();
  choice["finish_reason"] =
      d.finish_reason != nullptr ? nlohmann::json(*d.finish_reason) : nlohmann::json();
  j["choices"] = nlohmann::json::array({choice});
  if (with_usage) j["usage"] = nullptr;
  return j;
}

nlohmann::json tool_calls_json(std::span<const ToolCall> calls, const std::string& job_id,
                               int choice, int first_index, bool stream) {
  nlohmann::json out = nlohmann::json::array();
  int k = first_index;
  for (const auto& c : calls) {
    nlohmann::json e;
    if (stream) e["index"] = k;
    e["id"] = fmt::format("call_{}_{}_{}", job_id.substr(job_id.find('-') + 1), choice, k);
    e["type"] = "function";
    e["function"] = {{"name", c.name}, {"arguments", c.arguments}};
    out.push_back(std::move(e));
    ++k;
  }
  return out;
}

nlohmann::json usage_chunk_body(const ResponseHead& h, int64_t prompt_tokens,
                                const JobOutput& out) {
  nlohmann::json j = head_json(h, "chat.completion.chunk", "text_completion");
  j["choices"] = nlohmann::json::array();
  j["usage"] = usage_json(prompt_tokens, out.completion_tokens, out.cached_tokens);
  j["timings"] = timings_json(out.timings);
  return j;
}

std::string sse_event(const nlohmann::json& j) {
  return "data: " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace tq::serve
