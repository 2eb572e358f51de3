// `tq eval` as a library call: task accuracies of a model (and, with a base, of both on the
// same items, paired), with the protocol of each task and every item's result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "eval/paired.h"
#include "eval/results_db.h"
#include "eval/task_items.h"
#include "model/forward.h"

namespace tq::eval {

struct TaskEvalRequest {
  std::string model;
  std::string base;  // empty: no paired run
  std::vector<std::string> tasks;
  TaskOptions options;
  std::string data_dir;  // empty: default_eval_data_dir()
  RuntimeOptions runtime;
  bool show_progress = true;
  // Log-likelihood items whose contexts are prefilled side by side in one forward (1: item by
  // item); the scores are those of scoring each alone, up to the kernels' last bits.
  int batch = 4;
  // Take a task's results from the results database `db` ("": the default one) where this
  // model was scored on the same items under the same protocol and runtime before (either side
  // of a paired run), instead of scoring it again. One process only (not under mpirun).
  bool reuse = false;
  std::string db;
};

// One item on one model. Metric 0 / 1: acc / acc_norm (multiple choice), acc / - (LAMBADA),
// strict / flexible (GSM8K).
struct ItemResult {
  int64_t doc = 0;
  bool hit[2] = {false, false};
  int pred = -1, pred_norm = -1;  // multiple choice
  std::vector<double> ll;         // per choice; LAMBADA: the target's
  std::string output;             // GSM8K: the generation
  std::string extracted[2];       // GSM8K: strict, flexible
};

struct MetricValue {
  std::string name;
  MeanSe value;
};

struct TaskScores {
  std::vector<MetricValue> metrics;  // acc, acc_norm / acc, ppl / strict, flexible
  std::vector<ItemResult> items;
};

struct TaskResult {
  std::string name, protocol, base_protocol;
  std::string items_sha256;  // task_items_sha256(): which items were scored
  TaskKind kind = TaskKind::kChoice;
  bool chat = false;  // GSM8K through the chat template
  int64_t n = 0, docs = 0;
  TaskScores model;
  std::optional<TaskScores> base;
  std::vector<PairedDiff> paired;  // per 0/1 metric, when there is a base
  double seconds = 0;              // scoring time on the model (the base's not counted)
  int64_t reused_run = 0, base_reused_run = 0;  // the results database row read (0: scored)
};

struct TaskEvalResult {
  std::string model, model_fingerprint, base, base_fingerprint, runtime, base_runtime;
  std::vector<TaskResult> tasks;
  double seconds = 0;
};

Result<TaskEvalResult> run_task_eval(const TaskEvalRequest& r);

// The names of a kind's two 0/1 metrics ("" when it has one).
const char* metric_name(TaskKind kind, int i);

nlohmann::json task_eval_json(const TaskEvalResult& r, bool with_items);
// The results-database row: kind "eval", the result without per-item outputs of GSM8K.
RunRecord task_eval_record(const TaskEvalResult& r);
std::string task_eval_text(const TaskEvalResult& r);

}  // namespace tq::eval
