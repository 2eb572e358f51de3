// `tq ppl` as a library call: a model's perplexity on a text, windowed under the mlx-lm or
// llama.cpp protocol. The verb parses flags, calls run_ppl and prints the result.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "eval/results_db.h"
#include "eval/token_metrics.h"
#include "eval/windows.h"
#include "model/forward.h"

namespace tq::eval {

struct PplRequest {
  std::string model;  // HF or MLX directory, or a GGUF file
  std::string text;   // scored as its bytes are
  WindowSpec windows;
  RuntimeOptions runtime;
  bool show_progress = true;  // load and scoring progress on stderr
};

struct PplResult {
  Perplexity ppl;
  int64_t tokens_scored = 0;
  int64_t tokens_fed = 0;  // windows x (seq_len - 1): what tok_s counts
  std::string protocol;    // protocol_string(): how the number was measured
  std::string model, model_fingerprint, runtime;
  int64_t windows = 0, seq_len = 0;
  double seconds = 0, tok_s = 0;
};

Result<PplResult> run_ppl(const PplRequest& r);

// The --json object; also the results-database row's result.
nlohmann::json ppl_json(const PplResult& r);
RunRecord ppl_record(const PplResult& r);

}  // namespace tq::eval
