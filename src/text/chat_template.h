// Chat templates (tokenizer_config.json "chat_template", GGUF tokenizer.chat_template)
// rendered as transformers' apply_chat_template(messages, tokenize=False) renders them, by a
// Jinja2 subset interpreter (text/jinja/). Covers the templates of SmolLM2, Llama-3/3.1/
// 3.2/3.3, Qwen2.5 and Qwen3; constructs outside the subset are named in the error.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace tq {

// A parsed template, for rendering many conversations.
class ChatTemplate {
 public:
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Errors read "chat template line L col C: problem".
  static Result<ChatTemplate> parse(std::string_view template_text);

  // Variables: messages, add_generation_prompt, tools and documents (None unless extra_vars
  // sets them), then every key of extra_vars (bos_token, eos_token, enable_thinking, ...).
  // Objects keep their key order (tojson prints them in that order, as Python does).
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& extra_vars) const;

 private:
  ChatTemplate();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parse and render once. nlohmann::json sorts object keys; use ChatTemplate with ordered_json
// where tool schemas must keep their order.
Result<std::string> apply_chat_template(std::string_view template_text,
                                        const nlohmann::json& messages, bool add_generation_prompt,
                                        const nlohmann::json& extra_vars);

// The template named `name` in a tokenizer_config.json: "chat_template" is a string, or a list
// of {"name", "template"}. nullopt when there is none.
std::optional<std::string> chat_template_from_config(const nlohmann::json& tokenizer_config,
                                                     std::string_view name = "default");

// transformers' special_tokens_map as template variables: bos_token, eos_token, unk_token,
// sep_token, pad_token, cls_token, mask_token, when set (strings or {"content": ...}).
nlohmann::ordered_json chat_template_special_tokens(const nlohmann::json& tokenizer_config);

}  // namespace tq
