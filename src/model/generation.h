// One sequence's generation after its logits: logit adjustments, the sampler, end-of-sequence
// tokens, streaming detokenization and stop strings, and the token ceiling. `tq generate` and
// `tq serve` both drive it, so a prompt gives the same tokens and text through either.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "kernels/sampling.h"
#include "model/model_chat.h"
#include "text/chat_template.h"
#include "text/stop_matcher.h"
#include "text/stream_decoder.h"
#include "text/tokenizer.h"

namespace tq {

struct GenerationOptions {
  SamplingOptions sampling;
  LogitAdjust adjust;
  std::vector<std::string> stop;    // stop strings (matched on text, never emitted)
  std::vector<int32_t> eos;         // tokens that end the sequence (not emitted, not counted)
  int64_t max_tokens = 256;         // ceiling on the tokens generated
  bool trim_leading_space = false;  // as mlx-lm prints a generation (StreamDecoder)
  // A character whose bytes never all came (the end fell inside it) is dropped instead of
  // ending the text as U+FFFD (a server's text must never hold one the model did not write).
  bool drop_incomplete_tail = false;
};

// Why a generation ended: kStop (an end token or a stop string), kLength (max_tokens).
enum class Finish : uint8_t { kNone, kStop, kLength };
const char* finish_name(Finish f);  // "stop", "length", "" (OpenAI's finish_reason)

class Generation {
 public:
  Generation(const Tokenizer& tok, GenerationOptions o);

  // The next token from `logits` (adjusted in place first when the options ask for it).
  int32_t sample(std::span<float> logits);
  // Takes the sampled token: returns the text now final (never a partial UTF-8 character, never
  // a byte of a stop string) and sets finish() when the generation is over; the last call's
  // text includes everything held back.
  std::string accept(int32_t id);
  // Ends a generation early (nothing more comes): the held-back text.
  std::string end();

  Finish finish() const { return finish_; }
  bool eos_seen() const { return eos_seen_; }
  const std::vector<int32_t>& tokens() const { return decoder_.tokens(); }
  int64_t count() const { return static_cast<int64_t>(decoder_.tokens().size()); }
  int64_t max_tokens() const { return o_.max_tokens; }

 private:
  GenerationOptions o_;
  Sampler sampler_;
  StreamDecoder decoder_;
  StopMatcher stops_;
  Finish finish_ = Finish::kNone;
  bool eos_seen_ = false;
  std::vector<std::pair<int32_t, int32_t>> counts_;  // (token, times generated)
  std::unordered_map<int32_t, size_t> count_at_;     // token -> index in counts_
};

// A chat template parsed once, with the model's special tokens, for many conversations.
class ChatPrompter {
 public:
  // Errors when the model has no chat template or it does not parse.
  static Result<ChatPrompter> make(const ModelChat& chat);
  // The prompt text of a conversation, ending with the assistant's turn opened; `tools` (an
  // array of OpenAI tool definitions, or null) as the template's `tools` variable.
  Result<std::string> render(const nlohmann::ordered_json& messages,
                             const nlohmann::ordered_json& tools = nullptr) const;
  // The template uses the `tools` variable at all.
  bool renders_tools() const { return renders_tools_; }
  // Its models answer calls as <tool_call>{"name": ..., "arguments": ...}</tool_call>.
  bool tool_call_tags() const { return tool_call_tags_; }

 private:
  ChatPrompter(ChatTemplate t, nlohmann::ordered_json special, std::string source)
      : template_(std::move(t)), special_(std::move(special)), source_(std::move(source)) {}
  ChatTemplate template_;
  nlohmann::ordered_json special_;
  std::string source_;
  bool renders_tools_ = false;
  bool tool_call_tags_ = false;
};

// As mlx-lm: the model's eos ids plus the tokenizer's id of its eos_token string.
std::vector<int32_t> end_token_ids(const ModelChat& chat, const Tokenizer& tok);

}  // namespace tq
