// tq kl BASE CANDIDATE --text FILE: how far a candidate's next-token distributions are from the
// base's, token by token, on the same windows (streamed; nothing of the text held but NLL/KL).
#include <fmt/format.h>

#include <memory>

#include "cli/runtime_flags.h"
#include "cli/verb.h"
#include "eval/base_logits_file.h"
#include "eval/eval_model.h"
#include "eval/progress.h"
#include "eval/results_db.h"

namespace tq::cli {
namespace {

struct KlOptions {
  std::vector<std::string> models;
  std::string text, protocol = "mlx", bos = "auto", db, save_base, base_logits;
  int64_t seq_len = 512, windows = 0, top_k = 0;
  bool json = false, no_db = false;
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

nlohmann::json report_json(const eval::KlReport& r) {
  return {{"mean_kl", r.kl.mean},        {"median_kl", r.kl.median},
          {"p90_kl", r.kl.p90},          {"p99_kl", r.kl.p99},
          {"max_kl", r.kl.max},          {"top1_agreement", r.top1_agreement},
          {"argmax_flips", r.flips},     {"argmax_flip_ties", r.flip_ties},
          {"ppl_base", r.base.ppl},      {"ppl_base_se", r.base.se},
          {"ppl_candidate", r.cand.ppl}, {"ppl_candidate_se", r.cand.se},
          {"ppl_ratio", r.ppl_ratio},    {"tokens_scored", r.tokens}};
}

Status run_kl(const KlOptions& o) {
  TQ_CHECK_OK(check_options(o));
  eval::WindowSpec spec;
  TQ_TRY(spec.protocol, eval::parse_protocol(o.protocol));
  TQ_TRY(spec.bos, eval::parse_bos_mode(o.bos));
  spec.seq_len = o.seq_len;
  spec.windows = o.windows;
  TQ_TRY(eval::EvalText text, eval::read_eval_text(o.text));

  // Cheap checks first (vocabularies, tokenization, saved file), then the weights.
  const bool from_file = !o.base_logits.empty();
  TQ_TRY(eval::EvalModel cand, eval::open_eval_model(o.models.back()));
  const int64_t vocab = cand.src.config.vocab_size;
  std::optional<eval::EvalModel> base;
  std::optional<eval::BaseLogitsReader> base_file;
  std::string base_path, base_fingerprint;
  if (from_file) {
    TQ_TRY(auto f, eval::BaseLogitsReader::open(o.base_logits));
    base_file.emplace(std::move(f));
    base_path = base_file->header().model;
    base_fingerprint = base_file->header().model_fingerprint;
  } else {
    TQ_TRY(auto b, eval::open_eval_model(o.models[0]));
    base.emplace(std::move(b));
    base_path = base->path;
    base_fingerprint = base->fingerprint;
    if (base->src.config.vocab_size != vocab)
      return err("{} has a vocabulary of {} tokens, {} of {}: KL needs the same vocabulary",
                 base->path, base->src.config.vocab_size, cand.path, vocab);
  }
  TQ_TRY(eval::Windows w, eval::text_windows(from_file ? cand : *base, text, spec));
  if (from_file) {
    TQ_CHECK_OK(base_file->check_matches(w, text.sha256, vocab));
  } else {
    TQ_TRY(eval::Windows wc, eval::text_windows(cand, text, spec));
    if (wc.tokens != w.tokens)
      return err("{} and {} tokenize {} differently", base->path, cand.path, text.path);
  }
  std::optional<eval::BaseLogitsWriter> writer;
  if (!o.save_base.empty()) {
    eval::BaseLogitsHeader h;
    h.text_sha256 = text.sha256;
    h.protocol = w.protocol;
    h.seq_len = w.seq_len;
    h.windows = w.count;
    h.bos = w.bos;
    h.first_target = w.first_target;
    h.vocab = vocab;
    h.top_k = o.top_k;
    h.model = base->path;
    h.model_fingerprint = base->fingerprint;
    TQ_TRY(auto wr, eval::BaseLogitsWriter::create(o.save_base, h));
    writer.emplace(std::move(wr));
  }
  if (base) TQ_CHECK_OK(base->load_weights(true, o.runtime));
  TQ_CHECK_OK(cand.load_weights(true, o.runtime));

  std::optional<eval::LogitsModel> base_lm;
  if (base) base_lm = base->logits(w.seq_len);
  eval::ProgressLine progress("kl", (w.seq_len - 1) * (base ? 2 : 1));
  TQ_TRY(eval::KlTokens toks,
         eval::score_kl(w, base_lm ? &*base_lm : nullptr, base_file ? &*base_file : nullptr,
                        cand.logits(w.seq_len), writer ? &*writer : nullptr,
                        [&](int64_t d, int64_t t) { progress.update(d, t); }));
  if (writer) TQ_CHECK_OK(writer->finish());
  const double seconds = progress.elapsed_s();
  const eval::KlReport r = eval::kl_report(toks);
  const std::string protocol = eval::protocol_string(w, text.sha256);
  const int64_t base_top_k = base_file ? base_file->top_k() : 0;
  nlohmann::json j = report_json(r);
  j["protocol"] = protocol;
  j["base"] = base_path;
  j["candidate"] = cand.path;
  j["base_logits"] = from_file ? nlohmann::json(o.base_logits) : nlohmann::json(nullptr);
  j["base_top_k"] = base_top_k;
  j["windows"] = w.count;
  j["seq_len"] = w.seq_len;
  j["seconds"] = seconds;
  if (o.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print(
        "KL(base||candidate): mean {:.6g}  median {:.6g}  p90 {:.6g}  p99 {:.6g}  max {:.6g}{}\n",
        r.kl.mean, r.kl.median, r.kl.p90, r.kl.p99, r.kl.max,
        base_top_k ? fmt::format("  (top-{} base rows: a lower bound)", base_top_k) : "");
    fmt::print(
        "Top-1 agreement: {:.4f}% ({} argmax flips, {} of them ties within 1e-6 in the base)\n",
        100.0 * r.top1_agreement, r.flips, r.flip_ties);
    fmt::print("Perplexity: base {:.3f} ± {:.3f}, candidate {:.3f} ± {:.3f}, ratio {:.5f}\n",
               r.base.ppl, r.base.se, r.cand.ppl, r.cand.se, r.ppl_ratio);
    fmt::print("{}\n", protocol);
    fmt::print("base {}, candidate {}, {:.1f} s\n", base_path, cand.path, seconds);
  }
  std::fflush(stdout);
  if (o.no_db) return ok_status();
  eval::RunRecord rec;
  rec.kind = "kl";
  rec.artifact = cand.path;
  rec.model_fingerprint = cand.fingerprint;
  rec.base_artifact = base_path;
  rec.base_fingerprint = base_fingerprint;
  rec.protocol = protocol;
  rec.result = j;
  TQ_CHECK_OK(eval::append_run(o.db, rec));
  return ok_status();
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
       app.add_option("--text", o->text, "Text file to score (bytes as they are)")->required();
       app.add_option("--seq-len", o->seq_len, "Window length L (llamacpp: n_ctx)")
           ->capture_default_str();
       app.add_option("--windows", o->windows, "Score the first N windows (default: all)");
       app.add_option("--protocol", o->protocol, "mlx | llamacpp")->capture_default_str();
       app.add_option("--bos", o->bos, "auto | yes | no")->capture_default_str();
       app.add_option("--save-base", o->save_base,
                      "Also write the base model's rows to FILE, for --base-logits");
       app.add_option("--base-logits", o->base_logits,
                      "Read the base rows from a --save-base FILE instead of a BASE model");
       app.add_option("--top-k", o->top_k,
                      "--save-base keeps only the K most likely tokens per row (+ the rest's "
                      "mass); KL from such a file is a lower bound");
       app.add_flag("--json", o->json, "Print one JSON object");
       app.add_option("--db", o->db,
                      "Results database (default: $XDG_DATA_HOME/turboquant/results.sqlite)");
       app.add_flag("--no-db", o->no_db, "Do not record the run in the results database");
       add_runtime_flags(app, &o->runtime);
       return [o] { return run_kl(*o); };
     }});

}  // namespace
}  // namespace tq::cli
