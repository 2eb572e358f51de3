#include "serve/plan.h"

#include <fmt/format.h>

#include <random>

#include "serve/scheduler.h"

namespace tq::serve {

std::variant<std::shared_ptr<Job>, ApiError> plan_job(const CompletionRequest& r,
                                                      const ModelInfo& m, std::string job_id) {
  if (r.model && *r.model != m.id)
    return ApiError{
        404, fmt::format("The model '{}' does not exist; this server serves '{}'", *r.model, m.id),
        "invalid_request_error", "model", "model_not_found"};
  const bool chat = r.endpoint == Endpoint::kChat;
  const char* prompt_param = chat ? "messages" : "prompt";
  auto job = std::make_shared<Job>();
  job->id = std::move(job_id);
  if (chat) {
    if (m.prompter == nullptr)
      return bad_request("messages", "invalid_value",
                         "this model has no chat template; use /v1/completions");
    if (!r.tools.is_null() && !r.tools.empty() && !m.prompter->renders_tools())
      return bad_request("tools", "invalid_value",
                         "this model's chat template does not render tools");
    auto text =
        m.prompter->render(r.messages, r.tools.empty() ? nlohmann::ordered_json() : r.tools);
    if (!text) return bad_request("messages", "invalid_value", text.error().message);
    // The template writes its own BOS, as `tq generate --chat`.
    job->prompt = m.tokenizer->encode(*text, /*add_special=*/false);
  } else if (r.prompt_is_ids) {
    for (size_t i = 0; i < r.prompt_ids.size(); ++i)
      if (r.prompt_ids[i] >= m.vocab)
        return bad_request(fmt::format("prompt[{}]", i), "invalid_value",
                           fmt::format("token id {} is outside the vocabulary ({} tokens)",
                                       r.prompt_ids[i], m.vocab));
    job->prompt = r.prompt_ids;
  } else {
    job->prompt = m.tokenizer->encode(r.prompt_text, /*add_special=*/true);
  }
  for (const auto& [id, b] : r.adjust.bias)
    if (id >= m.vocab)
      return bad_request(
          fmt::format("logit_bias.{}", id), "invalid_value",
          fmt::format("token id {} is outside the vocabulary ({} tokens)", id, m.vocab));
  const auto len = static_cast<int64_t>(job->prompt.size());
  if (len == 0) return bad_request(prompt_param, "invalid_value", "the prompt has no tokens");
  if (len >= m.ctx)
    return bad_request(prompt_param, "context_length_exceeded",
                       fmt::format("the prompt has {} tokens; this server's context is {} tokens "
                                   "(prompt and completion), so it leaves no room to generate",
                                   len, m.ctx));
  // What fits the memory budget if the request ran alone: its `n` choices' blocks.
  const int64_t fits = m.kv_blocks > 0 ? m.kv_blocks / r.n * kKvBlock : m.ctx;
  if (len >= fits)
    return bad_request(prompt_param, "context_length_exceeded",
                       fmt::format("the prompt has {} tokens; this server's memory budget holds "
                                   "{} positions for each of {} choice(s), which leaves no room "
                                   "to generate",
                                   len, fits, r.n));
  // max_tokens is a ceiling: what does not fit the context (or the budget) ends with
  // finish_reason "length".
  const int64_t room = std::min(m.ctx, fits) - len;
  job->gen.max_tokens = r.max_tokens ? std::min(*r.max_tokens, room) : room;
  job->gen.sampling = r.sampling;
  if (!r.seeded) {
    std::random_device rd;
    job->gen.sampling.seed = (uint64_t{rd()} << 32) | rd();
  }
  job->gen.adjust = r.adjust;
  job->gen.stop = r.stop;
  if (!r.ignore_eos) job->gen.eos = m.eos;
  job->gen.drop_incomplete_tail = true;
  job->tool_calls = chat && !r.tools.is_null() && !r.tools.empty() && !r.tool_choice_none &&
                    m.prompter->tool_call_tags();
  job->n = r.n;
  job->top_logprobs = r.top_logprobs;
  job->stream = r.stream;
  return job;
}

}  // namespace tq::serve
