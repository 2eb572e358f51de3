// tq eval MODEL --task NAMES: task accuracies (lm-evaluation-harness formats, docs/EVAL.md);
// with --base SOURCE, both models on the same items, paired.
#include <fmt/format.h>

#include <memory>

#include "base/comm.h"
#include "cli/db_flags.h"
#include "cli/runtime_flags.h"
#include "cli/verb.h"
#include "eval/task_eval.h"

namespace tq::cli {
namespace {

struct EvalOptions {
  std::string model, base, tasks, data;
  eval::TaskOptions task;
  bool chat = false, raw = false, json = false, items = false, reuse = false;
  int batch = 4;
  DbFlags db;
  RuntimeOptions runtime;
};

Status run_eval(const EvalOptions& o) {
  if (o.task.limit < 0) return err("--limit must be >= 0, got {}", o.task.limit);
  if (o.task.shots < -1) return err("--shots must be >= 0, got {}", o.task.shots);
  if (o.batch < 1 || o.batch > 64) return err("--batch must be 1..64, got {}", o.batch);
  if (o.reuse && o.db.off) return err("--reuse reads the results database: drop --no-db");
  eval::TaskEvalRequest req;
  req.model = o.model;
  req.base = o.base;
  TQ_TRY(req.tasks, eval::parse_task_list(o.tasks));
  req.options = o.task;
  req.options.chat = o.chat;
  req.data_dir = o.data;
  req.runtime = o.runtime;
  req.batch = o.batch;
  req.reuse = o.reuse;
  req.db = o.db.path;
  req.show_progress = world().rank() == 0;
  TQ_TRY(eval::TaskEvalResult r, eval::run_task_eval(req));
  if (world().rank() != 0) return ok_status();
  if (o.json) {
    fmt::print("{}\n", eval::task_eval_json(r, o.items)
                           .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print("{}", eval::task_eval_text(r));
  }
  std::fflush(stdout);
  return record_run(o.db, eval::task_eval_record(r));
}

const bool kRegistered = register_verb(
    {"eval", "Task accuracy (MMLU, ARC, HellaSwag, ..., GSM8K), optionally paired with a base", 42,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<EvalOptions>();
       app.add_option("model", o->model, "HF or MLX safetensors directory, or a GGUF file")
           ->required();
       app.add_option("--task", o->tasks,
                      "Tasks, comma-separated: arc_easy, arc_challenge, boolq, hellaswag, "
                      "openbookqa, piqa, winogrande, lambada, mmlu, gsm8k; zeroshot (the first "
                      "eight), all")
           ->required();
       app.add_option("--base", o->base,
                      "Also score this model (the source) on the same items and pair the two");
       app.add_option("--limit", o->task.limit,
                      "Score a seeded subset of N items per task (0: all)")
           ->capture_default_str();
       app.add_option("--seed", o->task.seed, "Seed of the --limit subset and the bootstrap")
           ->capture_default_str();
       app.add_option("--shots", o->task.shots,
                      "Few-shot examples: mmlu (first K dev items of the subject, default 0), "
                      "gsm8k raw (the 8 CoT exemplars, default 8); other tasks are zero-shot");
       auto* chat =
           app.add_flag("--chat", o->chat, "GSM8K zero-shot through the model's chat template");
       auto* raw = app.add_flag("--raw", o->raw, "GSM8K 8-shot raw prompt (the default)");
       chat->excludes(raw);
       app.add_option("--data", o->data,
                      "Directory of the task JSONL files (default: $TQ_EVAL_DATA, else "
                      "$TQ_CACHE/eval, which scripts/setup fills)");
       app.add_option("--batch", o->batch,
                      "Log-likelihood items whose contexts are prefilled side by side in one "
                      "forward (1: item by item; scores equal up to the kernels' last bits)")
           ->capture_default_str();
       app.add_flag("--json", o->json, "Print one JSON object");
       app.add_flag("--items", o->items, "With --json: every item's result (for pairing)");
       app.add_flag("--reuse", o->reuse,
                    "Take a task's results from the results database where the same model was "
                    "scored on the same items, protocol and runtime before (as model or base), "
                    "instead of scoring it again");
       add_db_flags(app, &o->db);
       add_runtime_flags(app, &o->runtime);
       return [o] { return run_eval(*o); };
     }});

}  // namespace
}  // namespace tq::cli
