// tq kl BASE CANDIDATE --text FILE: how far a candidate's next-token distributions are from the
// base's, token by token, on the same windows (streamed; nothing of the text held but NLL/KL).
#include <fmt/format.h>

#include <memory>

#include "base/comm.h"
#include "cli/db_flags.h"
#include "cli/runtime_flags.h"
#include "cli/verb.h"
#include "cli/window_flags.h"
#include "eval/kl.h"

namespace tq::cli {
namespace {

struct KlOptions {
  std::vector<std::string> models;
  TextWindowFlags text;
  std::string save_base, base_logits;
  int64_t top_k = 0;
  bool json = false;
  DbFlags db;
  RuntimeOptions runtime;
};

Status check_options(const KlOptions& o) {
  if (!o.base_logits.empty()) {
    if (o.models.size() != 1)
      return err("with --base-logits give only the CANDIDATE model ({} models given)",
                 o.models.size());
    if (!o.save_base.empty()) return err("--save-base and --base-logits exclude each other");
  } else if (o.models.size() != 2) {
    return err("expected BASE and CANDIDATE models (or --base-logits FILE CANDIDATE), got {}",
               o.models.size());
  }
  if (o.top_k < 0) return err("--top-k must be positive, got {}", o.top_k);
  if (o.top_k > 0 && o.save_base.empty()) return err("--top-k applies only to --save-base");
  return ok_status();
}

Status run_kl(const KlOptions& o) {
  TQ_CHECK_OK(check_options(o));
  eval::KlRequest req;
  if (o.base_logits.empty()) req.base = o.models[0];
  req.base_logits = o.base_logits;
  req.candidate = o.models.back();
  req.save_base = o.save_base;
  req.top_k = o.top_k;
  req.text = o.text.text;
  TQ_TRY(req.windows, window_spec(o.text));
  req.runtime = o.runtime;
  req.show_progress = world().rank() == 0;  // under mpirun, rank 0 alone
  TQ_TRY(eval::KlResult res, eval::run_kl(req));
  if (world().rank() != 0) return ok_status();  // rank 0 gathered the windows and reports
  const eval::KlReport& r = res.report;
  if (o.json) {
    fmt::print("{}\n", eval::kl_json(res).dump());
  } else {
    fmt::print(
        "KL(base||candidate): mean {:.6g}  median {:.6g}  p90 {:.6g}  p99 {:.6g}  max {:.6g}{}\n",
        r.kl.mean, r.kl.median, r.kl.p90, r.kl.p99, r.kl.max,
        res.base_top_k ? fmt::format("  (top-{} base rows: a lower bound)", res.base_top_k) : "");
    fmt::print(
        "Top-1 agreement: {:.4f}% ({} argmax flips, {} of them ties within 1e-6 in the base)\n",
        100.0 * r.top1_agreement, r.flips, r.flip_ties);
    fmt::print("Perplexity: base {:.3f} ± {:.3f}, candidate {:.3f} ± {:.3f}, ratio {:.5f}\n",
               r.base.ppl, r.base.se, r.cand.ppl, r.cand.se, r.ppl_ratio);
    fmt::print("{}\n", res.protocol);
    fmt::print("base {}, candidate {}, {:.1f} s\n", res.base, res.candidate, res.seconds);
  }
  std::fflush(stdout);
  return record_run(o.db, eval::kl_record(res));
}

const bool kRegistered = register_verb(
    {"kl", "KL divergence, top-1 agreement and PPL of a candidate model against a base model", 41,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<KlOptions>();
       app.add_option("models", o->models,
                      "BASE CANDIDATE (or only CANDIDATE with --base-logits); each an HF or MLX "
                      "directory or a GGUF file")
           ->required()
           ->expected(1, 2);
       add_text_window_flags(app, &o->text);
       app.add_option("--save-base", o->save_base,
                      "Also write the base model's rows to FILE, for --base-logits");
       app.add_option("--base-logits", o->base_logits,
                      "Read the base rows from a --save-base FILE instead of a BASE model");
       app.add_option("--top-k", o->top_k,
                      "--save-base keeps only the K most likely tokens per row (+ the rest's "
                      "mass); KL from such a file is a lower bound");
       app.add_flag("--json", o->json, "Print one JSON object");
       add_db_flags(app, &o->db);
       add_runtime_flags(app, &o->runtime);
       return [o] { return run_kl(*o); };
     }});

}  // namespace
}  // namespace tq::cli
