#include "model/model_chat.h"

#include <sys/stat.h>

#include <filesystem>

#include "io/gguf.h"
#include "io/json_parse.h"
#include "model/gguf_model.h"
#include "model/gguf_tokenizer.h"
#include "text/chat_template.h"

namespace tq {
namespace {

bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// eos_token_id is an int or a list of ints.
Status add_eos_ids(const nlohmann::json& cfg, const std::string& source,
                   std::vector<int32_t>& out) {
  if (!cfg.is_object()) return ok_status();
  auto it = cfg.find("eos_token_id");
  if (it == cfg.end() || it->is_null()) return ok_status();
  auto add = [&](const nlohmann::json& v) -> Status {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      return err("{}: eos_token_id must be a token id, got {}", source, printable(v.dump()));
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
    return ok_status();
  };
  if (it->is_array()) {
    for (const auto& v : *it) TQ_CHECK_OK(add(v));
    return ok_status();
  }
  return add(*it);
}

void set_eos_token(const nlohmann::ordered_json& special, ModelChat& c) {
  auto it = special.find("eos_token");
  if (it != special.end() && it->is_string()) c.eos_token = it->get<std::string>();
}

Result<ModelChat> dir_chat(const ModelSource& m) {
  namespace fs = std::filesystem;
  ModelChat c;
  const std::string tc_path = (fs::path(m.path) / "tokenizer_config.json").string();
  nlohmann::json tc = nlohmann::json::object();
  if (is_file(tc_path)) {
    TQ_TRY(tc, read_json_file(tc_path));
    c.special_tokens = chat_template_special_tokens(tc);
    set_eos_token(c.special_tokens, c);
  }
  const std::string jinja_path = (fs::path(m.path) / "chat_template.jinja").string();
  const std::string ct_json_path = (fs::path(m.path) / "chat_template.json").string();
  if (is_file(jinja_path)) {
    TQ_TRY(std::string t, read_text_file(jinja_path));
    c.chat_template = std::move(t);
    c.template_source = jinja_path;
  } else if (is_file(ct_json_path)) {
    TQ_TRY(auto j, read_json_file(ct_json_path));
    c.chat_template = chat_template_from_config(j);
    c.template_source = ct_json_path;
  }
  if (!c.chat_template) {
    c.chat_template = chat_template_from_config(tc);
    c.template_source = tc_path;
  }
  const std::string gc_path = (fs::path(m.path) / "generation_config.json").string();
  nlohmann::json gc;
  if (is_file(gc_path)) {
    TQ_TRY(gc, read_json_file(gc_path));
  }
  if (gc.is_object() && gc.contains("eos_token_id") && !gc["eos_token_id"].is_null()) {
    TQ_CHECK_OK(add_eos_ids(gc, gc_path, c.eos_ids));
  } else {
    TQ_CHECK_OK(add_eos_ids(m.config_json, (fs::path(m.path) / "config.json").string(), c.eos_ids));
  }
  return c;
}

Result<ModelChat> gguf_chat(const ModelSource& m) {
  const auto* g = dynamic_cast<const GgufTensorSource*>(m.tensors.get());
  if (g == nullptr) return err("{}: GGUF model without a GGUF tensor source", m.path);
  TQ_TRY(HfTokenizerFiles files, gguf_hf_tokenizer(g->file()));
  ModelChat c;
  c.special_tokens = chat_template_special_tokens(files.tokenizer_config);
  set_eos_token(c.special_tokens, c);
  c.chat_template = chat_template_from_config(files.tokenizer_config);
  c.template_source = m.path + " (tokenizer.chat_template)";
  if (files.generation_config.contains("eos_token_id")) {
    TQ_CHECK_OK(add_eos_ids(files.generation_config, m.path, c.eos_ids));
  } else {
    TQ_CHECK_OK(add_eos_ids(m.config_json, m.path, c.eos_ids));
  }
  return c;
}

}  // namespace

Result<ModelChat> load_model_chat(const ModelSource& m) {
  if (m.kind == SourceKind::kGguf) return gguf_chat(m);
  return dir_chat(m);
}

}  // namespace tq
