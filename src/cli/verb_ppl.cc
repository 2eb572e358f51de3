// tq ppl MODEL --text FILE: perplexity under the mlx-lm (default) or llama.cpp protocol.
#include <fmt/format.h>

#include <memory>

#include "cli/runtime_flags.h"
#include "cli/verb.h"
#include "eval/eval_model.h"
#include "eval/progress.h"
#include "eval/results_db.h"

namespace tq::cli {
namespace {

struct PplOptions {
  std::string model, text, protocol = "mlx", bos = "auto", db;
  int64_t seq_len = 512, windows = 0;
  bool json = false, no_db = false;
  RuntimeOptions runtime;
};

Status run_ppl(const PplOptions& o) {
  eval::WindowSpec spec;
  TQ_TRY(spec.protocol, eval::parse_protocol(o.protocol));
  TQ_TRY(spec.bos, eval::parse_bos_mode(o.bos));
  spec.seq_len = o.seq_len;
  spec.windows = o.windows;
  TQ_TRY(eval::EvalText text, eval::read_eval_text(o.text));
  TQ_TRY(eval::EvalModel m, eval::open_eval_model(o.model));
  TQ_TRY(eval::Windows w, eval::text_windows(m, text, spec));
  TQ_CHECK_OK(m.load_weights(true, o.runtime));

  eval::ProgressLine progress("ppl", w.seq_len - 1);
  TQ_TRY(std::vector<double> nll,
         eval::score_nll(m.logits(w.seq_len), w,
                         [&](int64_t d, int64_t t) { progress.update(d, t); }));
  const double seconds = progress.elapsed_s();
  const eval::Perplexity p = eval::perplexity(nll);
  const std::string protocol = eval::protocol_string(w, text.sha256);
  const double tok_s = double(w.count * (w.seq_len - 1)) / seconds;
  nlohmann::json j = {{"ppl", p.ppl},
                      {"ppl_se", p.se},
                      {"tokens_scored", nll.size()},
                      {"protocol", protocol},
                      {"model", m.path},
                      {"windows", w.count},
                      {"seq_len", w.seq_len},
                      {"seconds", seconds},
                      {"tok_s", tok_s},
                      {"runtime", m.net->runtime_name()}};
  if (o.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("Perplexity: {:.3f} ± {:.3f}\n{}\n", p.ppl, p.se, protocol);
    fmt::print("{} tokens through {} in {:.1f} s ({:.0f} tok/s, {})\n", w.count * (w.seq_len - 1),
               m.path, seconds, tok_s, m.net->runtime_name());
  }
  std::fflush(stdout);
  if (o.no_db) return ok_status();
  eval::RunRecord r;
  r.kind = "ppl";
  r.artifact = m.path;
  r.model_fingerprint = m.fingerprint;
  r.protocol = protocol;
  r.result = j;
  TQ_CHECK_OK(eval::append_run(o.db, r));
  return ok_status();
}

const bool kRegistered = register_verb(
    {"ppl", "Perplexity of a model on a text (mlx-lm or llama.cpp protocol)", 40,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<PplOptions>();
       app.add_option("model", o->model, "HF or MLX safetensors directory, or a GGUF file")
           ->required();
       app.add_option("--text", o->text, "Text file to score (bytes as they are)")->required();
       app.add_option("--seq-len", o->seq_len, "Window length L (llamacpp: n_ctx)")
           ->capture_default_str();
       app.add_option("--windows", o->windows, "Score the first N windows (default: all)");
       app.add_option("--protocol", o->protocol, "mlx | llamacpp")->capture_default_str();
       app.add_option("--bos", o->bos,
                      "auto | yes | no (auto: no for mlx, the tokenizer's own for llamacpp)")
           ->capture_default_str();
       app.add_flag("--json", o->json, "Print one JSON object");
       app.add_option("--db", o->db,
                      "Results database (default: $XDG_DATA_HOME/turboquant/results.sqlite)");
       app.add_flag("--no-db", o->no_db, "Do not record the run in the results database");
       add_runtime_flags(app, &o->runtime);
       return [o] { return run_ppl(*o); };
     }});

}  // namespace
}  // namespace tq::cli
