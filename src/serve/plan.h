// From a checked request to a job the scheduler can run: the prompt's tokens (chat through the
// model's template), the context check, max_tokens capped to the context left, the sampler's
// seed, and the generation options. What only the model can judge (token ids outside the
// vocabulary, a prompt longer than the context) is refused here, as a 400.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "model/generation.h"
#include "serve/api_error.h"
#include "serve/job.h"
#include "serve/request.h"
#include "text/tokenizer.h"

namespace tq::serve {

// What planning needs to know of the model being served.
struct ModelInfo {
  std::string id;  // the name /v1/models lists and requests must use
  const Tokenizer* tokenizer = nullptr;
  const ChatPrompter* prompter = nullptr;  // null: the model has no chat template
  std::vector<int32_t> eos;
  int64_t vocab = 0;
  int64_t ctx = 0;        // tokens per sequence: prompt + generation
  int64_t kv_blocks = 0;  // KV blocks of the memory budget, all sequences together (0: no limit)
};

std::variant<std::shared_ptr<Job>, ApiError> plan_job(const CompletionRequest& r,
                                                      const ModelInfo& m, std::string job_id);

}  // namespace tq::serve
