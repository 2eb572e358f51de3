// The tasks `tq eval` scores, read from the JSONL files scripts/setup extracts into
// $TQ_CACHE/eval, and their prompts as lm-evaluation-harness builds them (docs/EVAL.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace tq::eval {

// kChoice: log-likelihood multiple choice (acc, acc_norm). kLastWord: one continuation, correct
// when every token of it is the greedy one (LAMBADA). kGenerate: greedy generation (GSM8K).
enum class TaskKind { kChoice, kLastWord, kGenerate };

// One log-likelihood request: the harness's (context, continuation) pair.
struct LlRequest {
  std::string context, continuation;
};

struct TaskItem {
  int64_t doc = 0;                   // line of the task file (0-based)
  std::vector<LlRequest> requests;   // kChoice: one per choice; kLastWord: one
  std::vector<std::string> choices;  // kChoice: the choice strings (acc_norm divides by length)
  int gold = 0;                      // kChoice: index of the right choice
  std::string prompt;                // kGenerate: raw prompt, or the user message under --chat
  std::string answer;                // kGenerate: the reference answer (after "####")
};

struct TaskOptions {
  int shots = -1;     // -1: the task's default (0; GSM8K raw 8)
  bool chat = false;  // GSM8K: zero-shot through the model's chat template
  int64_t limit = 0;  // 0: every item; else a seeded subset of this many
  uint64_t seed = 0;  // picks the subset
};

struct Task {
  std::string name;
  TaskKind kind = TaskKind::kChoice;
  std::string format;  // the protocol's words for this task: split, shots, template, metric
  int shots = 0;
  bool chat = false;
  int64_t docs = 0;  // items in the file
  std::vector<TaskItem> items;
};

// Every task name, in the order `--task all` runs them; "zeroshot" names the zero-shot suite.
const std::vector<std::string>& task_names();
// "a,b" -> names, with "zeroshot" and "all" expanded; errors name an unknown task.
Result<std::vector<std::string>> parse_task_list(const std::string& list);

// $TQ_EVAL_DATA, else $TQ_CACHE/eval, else ~/.cache/turboquant/eval.
std::string default_eval_data_dir();

// Reads `name`'s file(s) under `dir` and builds its items (the seeded subset when o.limit > 0,
// in file order). Errors name a missing file (with the setup hint) or a malformed line.
Result<Task> load_task(const std::string& name, const std::string& dir, const TaskOptions& o);

// Indices of a seeded subset: `k` of 0..n-1 (all when k <= 0 or k >= n), ascending.
std::vector<int64_t> seeded_subset(int64_t n, int64_t k, uint64_t seed);

// HellaSwag's text clean-up as the harness does it (strip, " [title]" -> ". ", "[...]" removed,
// double spaces halved).
std::string hellaswag_clean(const std::string& text);

}  // namespace tq::eval
