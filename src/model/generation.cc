#include "model/generation.h"

#include <algorithm>

namespace tq {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::kStop:
      return "stop";
    case Finish::kLength:
      return "length";
    case Finish::kNone:
      break;
  }
  return "";
}

Generation::Generation(const Tokenizer& tok, GenerationOptions o)
    : o_(std::move(o)),
      sampler_(o_.sampling),
      decoder_(tok, o_.trim_leading_space),
      stops_(o_.stop) {}

int32_t Generation::sample(std::span<float> logits) {
  if (o_.adjust.active()) adjust_logits(logits, o_.adjust, counts_);
  return sampler_.next(logits);
}

std::string Generation::accept(int32_t id) {
  if (finish_ != Finish::kNone) return {};
  if (std::find(o_.eos.begin(), o_.eos.end(), id) != o_.eos.end()) {
    eos_seen_ = true;
    finish_ = Finish::kStop;
    return end();
  }
  auto [it, fresh] = count_at_.try_emplace(id, counts_.size());
  if (fresh) counts_.push_back({id, 0});
  ++counts_[it->second].second;
  std::string text = stops_.add(decoder_.add(id));
  if (stops_.stopped()) {
    finish_ = Finish::kStop;
    return text;
  }
  if (count() >= o_.max_tokens) {
    text += end();
    finish_ = stops_.stopped() ? Finish::kStop : Finish::kLength;
  }
  return text;
}

std::string Generation::end() {
  if (stops_.stopped()) return {};
  std::string tail = decoder_.finish();
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  if (o_.drop_incomplete_tail && tail.ends_with(kReplacement))
    tail.resize(tail.size() - kReplacement.size());
  std::string text = stops_.add(tail);
  if (!stops_.stopped()) text += stops_.flush();
  return text;
}

Result<ChatPrompter> ChatPrompter::make(const ModelChat& chat) {
  if (!chat.chat_template) return err("the model has no chat template ({})", chat.template_source);
  auto t = ChatTemplate::parse(*chat.chat_template);
  if (!t) return err("{}: {}", chat.template_source, t.error().message);
  ChatPrompter p(std::move(t).value(), chat.special_tokens, chat.template_source);
  const std::string& text = *chat.chat_template;
  p.renders_tools_ = text.find("tools") != std::string::npos;
  p.tool_call_tags_ = text.find("<tool_call>") != std::string::npos;
  return p;
}

Result<std::string> ChatPrompter::render(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools) const {
  nlohmann::ordered_json vars = special_;
  if (!tools.is_null()) vars["tools"] = tools;
  auto text = template_.render(messages, /*add_generation_prompt=*/true, vars);
  if (!text) return err("{}: {}", source_, text.error().message);
  return text;
}

std::vector<int32_t> end_token_ids(const ModelChat& chat, const Tokenizer& tok) {
  std::vector<int32_t> eos = chat.eos_ids;
  if (chat.eos_token) {
    if (auto id = tok.token_to_id(*chat.eos_token)) eos.push_back(*id);
  }
  return eos;
}

}  // namespace tq
