// `tq kl` as a library call: how far a candidate's next-token distributions are from a base's
// on the same windows of a text, the base read from a model or from a --save-base file.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "eval/results_db.h"
#include "eval/scoring.h"
#include "eval/windows.h"
#include "model/forward.h"

namespace tq::eval {

struct KlRequest {
  std::string base;         // the base model; empty when base_logits is given
  std::string base_logits;  // a file written with save_base, read instead of a base model
  std::string candidate;
  std::string save_base;  // also write the base model's rows here
  int64_t top_k = 0;      // save_base keeps only the K most likely tokens per row
  std::string text;
  WindowSpec windows;
  RuntimeOptions runtime;
  bool show_progress = true;  // load and scoring progress on stderr
};

struct KlResult {
  KlReport report;
  std::string protocol;                // protocol_string(): how the numbers were measured
  std::string base, base_fingerprint;  // from the file's header with base_logits
  std::string candidate, candidate_fingerprint;
  std::string base_logits;  // as requested (empty: a base model)
  int64_t base_top_k = 0;   // > 0: the file held top-k rows, so KL is a lower bound
  int64_t windows = 0, seq_len = 0;
  double seconds = 0;
};

// Cheap checks (vocabularies, tokenization, the saved file) run before any weights load.
Result<KlResult> run_kl(const KlRequest& r);

// The --json object; also the results-database row's result.
nlohmann::json kl_json(const KlResult& r);
RunRecord kl_record(const KlResult& r);

}  // namespace tq::eval
