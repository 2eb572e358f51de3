// tq ppl MODEL --text FILE: perplexity under the mlx-lm (default) or llama.cpp protocol.
#include <fmt/format.h>

#include <memory>

#include "base/comm.h"
#include "cli/db_flags.h"
#include "cli/runtime_flags.h"
#include "cli/verb.h"
#include "cli/window_flags.h"
#include "eval/ppl.h"

namespace tq::cli {
namespace {

struct PplOptions {
  std::string model;
  TextWindowFlags text;
  bool json = false;
  DbFlags db;
  RuntimeOptions runtime;
};

Status run_ppl(const PplOptions& o) {
  eval::PplRequest req;
  req.model = o.model;
  req.text = o.text.text;
  TQ_TRY(req.windows, window_spec(o.text));
  req.runtime = o.runtime;
  req.show_progress = world().rank() == 0;  // under mpirun, rank 0 alone
  TQ_TRY(eval::PplResult r, eval::run_ppl(req));
  if (world().rank() != 0) return ok_status();  // rank 0 gathered the windows and reports
  if (o.json) {
    fmt::print("{}\n", eval::ppl_json(r).dump());
  } else {
    fmt::print("Perplexity: {:.3f} ± {:.3f}\n{}\n", r.ppl.ppl, r.ppl.se, r.protocol);
    fmt::print("{} tokens through {} in {:.1f} s ({:.0f} tok/s, {})\n", r.tokens_fed, r.model,
               r.seconds, r.tok_s, r.runtime);
  }
  std::fflush(stdout);
  return record_run(o.db, eval::ppl_record(r));
}

const bool kRegistered = register_verb(
    {"ppl", "Perplexity of a model on a text (mlx-lm or llama.cpp protocol)", 40,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<PplOptions>();
       app.add_option("model", o->model, "HF or MLX safetensors directory, or a GGUF file")
           ->required();
       add_text_window_flags(app, &o->text);
       app.add_flag("--json", o->json, "Print one JSON object");
       add_db_flags(app, &o->db);
       add_runtime_flags(app, &o->runtime);
       return [o] { return run_ppl(*o); };
     }});

}  // namespace
}  // namespace tq::cli
