#include "eval/scoring.h"

#include "eval/base_logits_file.h"

namespace tq::eval {
namespace {

Status check_targets(std::span<const int32_t> window, int64_t vocab) {
  for (int32_t t : window)
    if (t < 0 || t >= vocab)
      return err("token id {} outside the model's vocabulary of {}", t, vocab);
  return ok_status();
}

constexpr int kTagNll = 21, kTagKl = 22;

RankRange my_windows(const Windows& w, Comm* comm) {
  return comm ? rank_range(w.count, comm->rank(), comm->size()) : RankRange{0, w.count};
}

// Rank 0 appends every other rank's values, in rank order (= window order); the others send.
Status gather_doubles(Comm* comm, const Windows& w, int tag, std::vector<double>* v) {
  if (!comm || comm->size() == 1) return ok_status();
  if (comm->rank() != 0) return send_large(*comm, 0, tag, std::span<const double>(*v));
  const int64_t per_window = w.seq_len - w.first_target;
  for (int r = 1; r < comm->size(); ++r) {
    const RankRange rr = rank_range(w.count, r, comm->size());
    const size_t n = size_t((rr.end - rr.begin) * per_window), at = v->size();
    v->resize(at + n);
    TQ_CHECK_OK(recv_large(*comm, r, tag, std::span<double>(v->data() + at, n)));
  }
  return ok_status();
}

}  // namespace

Result<std::vector<double>> score_nll(const LogitsModel& model, const Windows& w,
                                      const WindowProgress& progress, Comm* comm) {
  std::vector<double> nll;
  nll.reserve(size_t(w.tokens_scored()));
  std::vector<float> rows;
  const size_t V = size_t(model.vocab);
  const RankRange mine = my_windows(w, comm);
  for (int64_t i = mine.begin; i < mine.end; ++i) {
    auto win = w.window(i);
    TQ_CHECK_OK(check_targets(win, model.vocab));
    rows.resize((win.size() - 1) * V);
    TQ_CHECK_OK(model.window_logits(win.first(win.size() - 1), rows));
    for (int64_t t = w.first_target; t < w.seq_len; ++t)
      nll.push_back(token_nll({rows.data() + size_t(t - 1) * V, V}, win[t]));
    if (progress) progress(i + 1 - mine.begin, mine.end - mine.begin);
  }
  TQ_CHECK_OK(gather_doubles(comm, w, kTagNll, &nll));
  return nll;
}

void KlTokens::add(const TokenCompare& c) {
  kl.push_back(c.kl);
  nll_base.push_back(c.nll_base);
  nll_cand.push_back(c.nll_cand);
  if (c.argmax_base == c.argmax_cand) {
    ++agree;
  } else {
    ++flips;
    if (c.base_gap <= kTieEps) ++flip_ties;
  }
}

KlReport kl_report(const KlTokens& t) {
  KlReport r;
  r.kl = summarize(t.kl);
  r.tokens = int64_t(t.kl.size());
  r.top1_agreement = r.tokens ? double(t.agree) / double(r.tokens) : 0.0;
  r.flips = t.flips;
  r.flip_ties = t.flip_ties;
  r.base = perplexity(t.nll_base);
  r.cand = perplexity(t.nll_cand);
  r.ppl_ratio = r.cand.ppl / r.base.ppl;
  return r;
}

Result<KlTokens> score_kl(const Windows& w, const LogitsModel* base_model,
                          const BaseLogitsReader* base_file, const LogitsModel& cand,
                          BaseLogitsWriter* save, const WindowProgress& progress, Comm* comm) {
  const size_t V = size_t(cand.vocab);
  if (save && comm && comm->size() > 1)
    return err("saving base rows runs on one rank (not under mpirun -np {})", comm->size());
  const RankRange mine = my_windows(w, comm);
  if (base_model && base_model->vocab != cand.vocab)
    return err("base and candidate vocabularies differ ({} vs {})", base_model->vocab, cand.vocab);
  KlTokens out;
  std::vector<float> base_rows, cand_rows;
  for (int64_t i = mine.begin; i < mine.end; ++i) {
    auto win = w.window(i);
    TQ_CHECK_OK(check_targets(win, cand.vocab));
    const size_t n = win.size() - 1;
    cand_rows.resize(n * V);
    TQ_CHECK_OK(cand.window_logits(win.first(n), cand_rows));
    if (base_model) {
      base_rows.resize(n * V);
      TQ_CHECK_OK(base_model->window_logits(win.first(n), base_rows));
      if (save) TQ_CHECK_OK(save->write_window(win, base_rows));
      for (int64_t t = w.first_target; t < w.seq_len; ++t) {
        size_t off = size_t(t - 1) * V;
        out.add(compare_rows({base_rows.data() + off, V}, {cand_rows.data() + off, V}, win[t]));
      }
    } else {
      for (int64_t t = w.first_target; t < w.seq_len; ++t) {
        std::span<const float> c{cand_rows.data() + size_t(t - 1) * V, V};
        int64_t j = t - w.first_target;
        if (base_file->top_k() == 0) {
          out.add(compare_rows(base_file->full_row(i, j), c, win[t]));
        } else {
          out.add(compare_topk(base_file->topk_row(i, j), c, win[t]));
        }
      }
    }
    if (progress) progress(i + 1 - mine.begin, mine.end - mine.begin);
  }
  if (comm && comm->size() > 1) {
    // Counts add in any order; per-token values are appended in window order.
    std::vector<int64_t> counts = {out.agree, out.flips, out.flip_ties};
    if (comm->rank() != 0) {
      TQ_CHECK_OK(send_values(*comm, 0, kTagKl, std::span<const int64_t>(counts)));
    } else {
      for (int r = 1; r < comm->size(); ++r) {
        TQ_CHECK_OK(recv_values(*comm, r, kTagKl, &counts));
        if (counts.size() != 3) return err("rank {}: bad KL counts message", r);
        out.agree += counts[0];
        out.flips += counts[1];
        out.flip_ties += counts[2];
      }
    }
    TQ_CHECK_OK(gather_doubles(comm, w, kTagKl, &out.kl));
    TQ_CHECK_OK(gather_doubles(comm, w, kTagKl, &out.nll_base));
    TQ_CHECK_OK(gather_doubles(comm, w, kTagKl, &out.nll_cand));
  }
  return out;
}

}  // namespace tq::eval
