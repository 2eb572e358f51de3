// What `tq ppl` and `tq kl` share: the evaluation text, a model with its tokenizer and
// fingerprint, and the token windows of the text under a protocol.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/result.h"
#include "eval/scoring.h"
#include "eval/windows.h"
#include "model/forward.h"
#include "model/model_source.h"
#include "text/tokenizer.h"

namespace tq::eval {

struct EvalText {
  std::string path;
  std::string bytes;  // as in the file (CRLF kept)
  std::string sha256;
};
// Errors when the file is unreadable or empty.
Result<EvalText> read_eval_text(const std::string& path);

struct EvalModel {
  std::string path;
  ModelSource src;
  std::optional<Tokenizer> tokenizer;
  std::string fingerprint;
  std::unique_ptr<Transformer> net;  // set by load_weights()

  // Loads the network on the runtime `runtime` selects, then releases the tensor source
  // (src.tensors becomes null).
  Status load_weights(bool show_progress, const RuntimeOptions& runtime = {});
  // The loaded network as the drivers see it, for windows of up to `max_len` tokens.
  LogitsModel logits(int64_t max_len) const;
};
// Opens the model and its tokenizer (weights are loaded later, after cheap checks).
// `fingerprint`: the model's, hashed before by the caller (else hashed here: it reads every byte).
Result<EvalModel> open_eval_model(const std::string& path, bool with_tokenizer = true,
                                  std::string fingerprint = {});

// The BOS the tokenizer's post-processor prepends, else config.json's bos_token_id.
BosInfo bos_info(const Tokenizer& tok, const nlohmann::json& config_json);

// Tokenizes the whole text without special tokens and cuts it into windows; errors name the
// text (empty, too short) or the model (token ids outside its vocabulary).
Result<Windows> text_windows(const EvalModel& m, const EvalText& text, const WindowSpec& spec);

}  // namespace tq::eval
