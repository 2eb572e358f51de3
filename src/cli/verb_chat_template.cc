// tq chat-template [MODEL] --messages FILE: the prompt text a chat template makes of a
// conversation (what `tq generate --chat` feeds the model), printed exactly, no newline added.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/verb.h"
#include "io/json_parse.h"
#include "model/model_chat.h"
#include "text/chat_template.h"

namespace tq::cli {
namespace {

struct ChatTemplateOptions {
  std::string model;
  std::string template_file;
  std::string messages_file;
  std::string vars_file;
  bool no_generation_prompt = false;
};

// Ordered parse: tool schemas keep their key order, as in Python.
Result<nlohmann::ordered_json> read_ordered_json(const std::string& path) {
  TQ_TRY(std::string text, read_text_file(path));
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return err("{}: invalid JSON: {}", path, printable(e.what()));
  }
}

Status run_chat_template(const ChatTemplateOptions& o) {
  if (o.model.empty() == o.template_file.empty())
    return err("give either a MODEL or --template FILE");
  std::string text, source;
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (!o.model.empty()) {
    TQ_TRY(ModelSource m, open_model(o.model));
    TQ_TRY(ModelChat chat, load_model_chat(m));
    if (!chat.chat_template) return err("{}: the model has no chat template", chat.template_source);
    text = *chat.chat_template;
    source = chat.template_source;
    vars = chat.special_tokens;
  } else {
    TQ_TRY(text, read_text_file(o.template_file));
    source = o.template_file;
  }
  TQ_TRY(nlohmann::ordered_json messages, read_ordered_json(o.messages_file));
  if (!o.vars_file.empty()) {
    TQ_TRY(nlohmann::ordered_json extra, read_ordered_json(o.vars_file));
    if (!extra.is_object()) return err("{}: expected a JSON object", o.vars_file);
    for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  }
  auto tmpl = ChatTemplate::parse(text);
  if (!tmpl) return err("{}: {}", source, tmpl.error().message);
  auto out = tmpl->render(messages, !o.no_generation_prompt, vars);
  if (!out) return err("{}: {}", source, out.error().message);
  std::fwrite(out->data(), 1, out->size(), stdout);
  return ok_status();
}

const bool kRegistered = register_verb(
    {"chat-template", "Render a chat template for a conversation (the prompt of generate --chat)",
     75, [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<ChatTemplateOptions>();
       app.add_option("model", o->model,
                      "model whose template to use: HF/MLX directory or GGUF file");
       app.add_option("--template", o->template_file, "a template file instead of a model's");
       app.add_option("--messages", o->messages_file,
                      "JSON array of messages ({\"role\", \"content\", ...})")
           ->required();
       app.add_option("--vars", o->vars_file,
                      "JSON object of extra template variables (tools, enable_thinking, "
                      "bos_token, ...); they override the model's special tokens");
       app.add_flag("--no-generation-prompt", o->no_generation_prompt,
                    "render with add_generation_prompt=false");
       return [o] { return run_chat_template(*o); };
     }});

}  // namespace
}  // namespace tq::cli
