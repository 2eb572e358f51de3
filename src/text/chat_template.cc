#include "text/chat_template.h"

#include "text/jinja/eval.h"
#include "text/jinja/parser.h"

namespace tq {

struct ChatTemplate::Impl {
  jinja::Body body;
};

ChatTemplate::ChatTemplate() : impl_(std::make_unique<Impl>()) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

namespace {

Error prefixed(const Error& e) {
  if (e.message.rfind("line ", 0) == 0) return err("chat template {}", e.message);
  return err("chat template: {}", e.message);
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view template_text) {
  auto body = jinja::parse_template(template_text);
  if (!body) return prefixed(body.error());
  ChatTemplate t;
  t.impl_->body = std::move(body).value();
  return t;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra_vars) const {
  if (!messages.is_array()) return err("chat template: messages must be a JSON array");
  if (!extra_vars.is_null() && !extra_vars.is_object())
    return err("chat template: extra variables must be a JSON object");
  std::vector<std::pair<std::string, jinja::Value>> vars;
  auto msgs = jinja::from_json(messages);
  if (!msgs) return err("chat template: messages: {}", msgs.error().message);
  vars.emplace_back("messages", std::move(msgs).value());
  vars.emplace_back("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  vars.emplace_back("tools", jinja::Value::none());
  vars.emplace_back("documents", jinja::Value::none());
  if (extra_vars.is_object()) {
    for (auto it = extra_vars.begin(); it != extra_vars.end(); ++it) {
      auto v = jinja::from_json(it.value());
      if (!v) return err("chat template: variable '{}': {}", it.key(), v.error().message);
      bool replaced = false;
      for (auto& [k, old] : vars) {
        if (k == it.key()) {
          old = *v;
          replaced = true;
        }
      }
      if (!replaced) vars.emplace_back(it.key(), std::move(v).value());
    }
  }
  auto out = jinja::render(impl_->body, vars);
  if (!out) return prefixed(out.error());
  return out;
}

Result<std::string> apply_chat_template(std::string_view template_text,
                                        const nlohmann::json& messages, bool add_generation_prompt,
                                        const nlohmann::json& extra_vars) {
  TQ_TRY(ChatTemplate t, ChatTemplate::parse(template_text));
  nlohmann::ordered_json m, x;
  try {
    m = nlohmann::ordered_json::parse(messages.dump());
    x = nlohmann::ordered_json::parse(extra_vars.dump());
  } catch (const nlohmann::json::exception& e) {
    return err("chat template: cannot convert the variables: {}", e.what());
  }
  return t.render(m, add_generation_prompt, x);
}

std::optional<std::string> chat_template_from_config(const nlohmann::json& cfg,
                                                     std::string_view name) {
  if (!cfg.is_object()) return std::nullopt;
  auto it = cfg.find("chat_template");
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& e : *it) {
      if (!e.is_object()) continue;
      auto n = e.find("name");
      auto t = e.find("template");
      if (n != e.end() && t != e.end() && n->is_string() && t->is_string() &&
          n->get<std::string>() == name)
        return t->get<std::string>();
    }
  }
  return std::nullopt;
}

nlohmann::ordered_json chat_template_special_tokens(const nlohmann::json& cfg) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (!cfg.is_object()) return out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    auto it = cfg.find(key);
    if (it == cfg.end()) continue;
    if (it->is_string()) {
      out[key] = it->get<std::string>();
    } else if (it->is_object()) {
      auto c = it->find("content");
      if (c != it->end() && c->is_string()) out[key] = c->get<std::string>();
    }
  }
  return out;
}

}  // namespace tq
