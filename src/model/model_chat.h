// What generation needs from a model's tokenizer files besides the tokenizer itself: the chat
// template, the special-token strings templates use, and the end-of-sequence tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "model/model_source.h"

namespace tq {

struct ModelChat {
  std::optional<std::string> chat_template;
  std::string template_source;  // the file the template came from, for error messages
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();  // bos_token, ...
  // As mlx-lm: eos_token_id of generation_config.json (else config.json), plus the id of the
  // tokenizer's eos_token, which the caller resolves with the tokenizer (eos_token below).
  std::vector<int32_t> eos_ids;
  std::optional<std::string> eos_token;
};

// A directory: chat_template.jinja, else chat_template.json, else tokenizer_config.json's
// "chat_template"; special tokens from tokenizer_config.json. A GGUF file: the files
// `tq import` rebuilds from its metadata (tokenizer.chat_template, token ids).
Result<ModelChat> load_model_chat(const ModelSource& m);

}  // namespace tq
