#include "eval/ppl.h"

#include "eval/eval_model.h"
#include "eval/progress.h"

namespace tq::eval {

Result<PplResult> run_ppl(const PplRequest& r) {
  TQ_TRY(EvalText text, read_eval_text(r.text));
  TQ_TRY(EvalModel m, open_eval_model(r.model));
  TQ_TRY(Windows w, text_windows(m, text, r.windows));
  TQ_CHECK_OK(m.load_weights(r.show_progress, r.runtime));

  ProgressLine progress("ppl", w.seq_len - 1, r.show_progress);
  TQ_TRY(
      std::vector<double> nll,
      score_nll(
          m.logits(w.seq_len), w, [&](int64_t d, int64_t t) { progress.update(d, t); }, &world()));
  PplResult out;
  out.seconds = progress.elapsed_s();
  out.ppl = perplexity(nll);
  out.tokens_scored = static_cast<int64_t>(nll.size());
  out.tokens_fed = w.count * (w.seq_len - 1);
  out.protocol = protocol_string(w, text.sha256);
  out.model = m.path;
  out.model_fingerprint = m.fingerprint;
  out.runtime = m.net->runtime_name();
  out.windows = w.count;
  out.seq_len = w.seq_len;
  out.tok_s = double(out.tokens_fed) / out.seconds;
  return out;
}

nlohmann::json ppl_json(const PplResult& r) {
  return {{"ppl", r.ppl.ppl},       {"ppl_se", r.ppl.se},   {"tokens_scored", r.tokens_scored},
          {"protocol", r.protocol}, {"model", r.model},     {"windows", r.windows},
          {"seq_len", r.seq_len},   {"seconds", r.seconds}, {"tok_s", r.tok_s},
          {"runtime", r.runtime}};
}

RunRecord ppl_record(const PplResult& r) {
  RunRecord rec;
  rec.kind = "ppl";
  rec.artifact = r.model;
  rec.model_fingerprint = r.model_fingerprint;
  rec.protocol = r.protocol;
  rec.result = ppl_json(r);
  return rec;
}

}  // namespace tq::eval
