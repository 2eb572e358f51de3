#include "eval/kl.h"

#include <optional>

#include "eval/base_logits_file.h"
#include "eval/eval_model.h"
#include "eval/progress.h"

namespace tq::eval {

Result<KlResult> run_kl(const KlRequest& r) {
  const bool from_file = !r.base_logits.empty();
  if (from_file == !r.base.empty())
    return err("kl needs exactly one of a base model and a base-logits file");
  if (from_file && !r.save_base.empty()) return err("saving base rows needs a base model");
  if (!r.save_base.empty() && world().size() > 1)
    return err("saving base rows runs on one rank (not under mpirun -np {})", world().size());
  TQ_TRY(EvalText text, read_eval_text(r.text));

  // Cheap checks first (vocabularies, tokenization, saved file), then the weights.
  TQ_TRY(EvalModel cand, open_eval_model(r.candidate));
  const int64_t vocab = cand.src.config.vocab_size;
  std::optional<EvalModel> base;
  std::optional<BaseLogitsReader> base_file;
  KlResult out;
  if (from_file) {
    TQ_TRY(auto f, BaseLogitsReader::open(r.base_logits));
    base_file.emplace(std::move(f));
    out.base = base_file->header().model;
    out.base_fingerprint = base_file->header().model_fingerprint;
  } else {
    TQ_TRY(auto b, open_eval_model(r.base));
    base.emplace(std::move(b));
    out.base = base->path;
    out.base_fingerprint = base->fingerprint;
    if (base->src.config.vocab_size != vocab)
      return err("{} has a vocabulary of {} tokens, {} of {}: KL needs the same vocabulary",
                 base->path, base->src.config.vocab_size, cand.path, vocab);
  }
  TQ_TRY(Windows w, text_windows(from_file ? cand : *base, text, r.windows));
  if (from_file) {
    TQ_CHECK_OK(base_file->check_matches(w, text.sha256, vocab));
  } else {
    TQ_TRY(Windows wc, text_windows(cand, text, r.windows));
    if (wc.tokens != w.tokens)
      return err("{} and {} tokenize {} differently", base->path, cand.path, text.path);
  }
  std::optional<BaseLogitsWriter> writer;
  if (!r.save_base.empty()) {
    BaseLogitsHeader h;
    h.text_sha256 = text.sha256;
    h.protocol = w.protocol;
    h.seq_len = w.seq_len;
    h.windows = w.count;
    h.bos = w.bos;
    h.first_target = w.first_target;
    h.vocab = vocab;
    h.top_k = r.top_k;
    h.model = base->path;
    h.model_fingerprint = base->fingerprint;
    TQ_TRY(auto wr, BaseLogitsWriter::create(r.save_base, h));
    writer.emplace(std::move(wr));
  }
  if (base) TQ_CHECK_OK(base->load_weights(r.show_progress, r.runtime));
  TQ_CHECK_OK(cand.load_weights(r.show_progress, r.runtime));

  std::optional<LogitsModel> base_lm;
  if (base) base_lm = base->logits(w.seq_len);
  ProgressLine progress("kl", (w.seq_len - 1) * (base ? 2 : 1), r.show_progress);
  TQ_TRY(KlTokens toks, score_kl(
                            w, base_lm ? &*base_lm : nullptr, base_file ? &*base_file : nullptr,
                            cand.logits(w.seq_len), writer ? &*writer : nullptr,
                            [&](int64_t d, int64_t t) { progress.update(d, t); }, &world()));
  if (writer) TQ_CHECK_OK(writer->finish());
  out.seconds = progress.elapsed_s();
  out.report = kl_report(toks);
  out.protocol = protocol_string(w, text.sha256);
  out.candidate = cand.path;
  out.candidate_fingerprint = cand.fingerprint;
  out.base_logits = r.base_logits;
  out.base_top_k = base_file ? base_file->top_k() : 0;
  out.windows = w.count;
  out.seq_len = w.seq_len;
  return out;
}

nlohmann::json kl_json(const KlResult& r) {
  const KlReport& k = r.report;
  return {{"mean_kl", k.kl.mean},
          {"median_kl", k.kl.median},
          {"p90_kl", k.kl.p90},
          {"p99_kl", k.kl.p99},
          {"max_kl", k.kl.max},
          {"top1_agreement", k.top1_agreement},
          {"argmax_flips", k.flips},
          {"argmax_flip_ties", k.flip_ties},
          {"ppl_base", k.base.ppl},
          {"ppl_base_se", k.base.se},
          {"ppl_candidate", k.cand.ppl},
          {"ppl_candidate_se", k.cand.se},
          {"ppl_ratio", k.ppl_ratio},
          {"tokens_scored", k.tokens},
          {"protocol", r.protocol},
          {"base", r.base},
          {"candidate", r.candidate},
          {"base_logits",
           r.base_logits.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.base_logits)},
          {"base_top_k", r.base_top_k},
          {"windows", r.windows},
          {"seq_len", r.seq_len},
          {"seconds", r.seconds}};
}

RunRecord kl_record(const KlResult& r) {
  RunRecord rec;
  rec.kind = "kl";
  rec.artifact = r.candidate;
  rec.model_fingerprint = r.candidate_fingerprint;
  rec.base_artifact = r.base;
  rec.base_fingerprint = r.base_fingerprint;
  rec.protocol = r.protocol;
  rec.result = kl_json(r);
  return rec;
}

}  // namespace tq::eval
