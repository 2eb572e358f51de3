// Task results kept in the results database and found again (`tq eval --reuse`): a task scored
// before on the same model, runtime, protocol and items need not be scored again, so a source
// paired with several candidates is scored once, and a long run resumes task by task.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "eval/results_db.h"
#include "eval/task_eval.h"

namespace tq::eval {

// The identity of a task's items: each item's document, requests, choices and answer, hashed.
std::string task_items_sha256(const Task& t);

struct StoredTask {
  int64_t run_id = 0;
  std::string time_utc;
  TaskScores scores;  // the metrics and each item's hits (no log-likelihoods or outputs)
};

// What an eval run must match to stand for scoring task `t` again.
struct StoredTaskKey {
  std::string fingerprint;  // the model's, as the run's model or as its base
  std::string runtime;      // Transformer::runtime_name() of that side; empty: any
  std::string protocol;     // task_protocol() of the task on that model
  std::string items_sha256;
};

// The newest run among `runs` (kind "eval") that scored the task under `key`, its items in the
// task's order; nullopt when none did (records written before items were hashed never match).
std::optional<StoredTask> find_stored_task(const std::vector<RunRecord>& runs, const Task& t,
                                           const StoredTaskKey& key);

}  // namespace tq::eval
