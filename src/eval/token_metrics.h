// Per-token quality metrics from logits rows, and the aggregates that `tq ppl` / `tq kl` report.
// Sums and logs are accumulated in f64; exp() of each shifted logit is taken in f32.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tq::eval {

// log(sum_i exp(x_i)); x must be non-empty.
double logsumexp(std::span<const float> x);
// Negative log-likelihood (natural log) of `target` under softmax(logits).
double token_nll(std::span<const float> logits, int32_t target);
// First index of the maximum (as numpy.argmax).
int32_t argmax(std::span<const float> x);

// Everything `tq kl` needs from one scored position of both models.
struct TokenCompare {
  double kl = 0;        // KL(base || cand) = sum_i p_i (log p_i - log q_i)
  double nll_base = 0;  // -log p(target)
  double nll_cand = 0;  // -log q(target)
  int32_t argmax_base = 0;
  int32_t argmax_cand = 0;
  float base_gap = 0;  // base top-1 minus top-2 logit (0 when the maximum repeats)
};
TokenCompare compare_rows(std::span<const float> base, std::span<const float> cand, int32_t target);

// A base row reduced to its k most likely tokens (what `--save-base --top-k K` stores).
// Raw logits and the row's logsumexp are kept (not rounded log-probs), so that a model compared
// with its own saved top-k rows gives KL exactly 0, as with full rows.
struct TopKRow {
  std::vector<int32_t> ids;   // k ids, most likely first (ties: lower id first)
  std::vector<float> logits;  // their logits
  double lse = 0;             // logsumexp of the whole row
  double log_rest = 0;        // log of the summed probability of all other tokens (-inf if none)
  float gap = 0;              // top-1 minus top-2 logit
  double nll = 0;             // exact -log p(target), kept so that the base PPL stays exact
};
TopKRow make_topk_row(std::span<const float> logits, int32_t target, int k);
// KL between the (k+1)-bucket coarsenings of both distributions (the k tokens, and "the rest"):
// a lower bound of the full KL (data-processing inequality), equal to it when the rest is empty.
TokenCompare compare_topk(const TopKRow& base, std::span<const float> cand, int32_t target);

// Order statistics use numpy's default (linear interpolation between closest ranks).
double percentile_sorted(std::span<const double> sorted, double q);  // q in [0, 100]

struct Summary {
  int64_t n = 0;
  double mean = 0;
  double std = 0;  // sample standard deviation (ddof = 1); NaN when n < 2
  double median = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};
Summary summarize(std::span<const double> v);

// PPL = exp(mean NLL); se = PPL * std(NLL, ddof=1) / sqrt(N) (mlx_lm.perplexity's ±).
struct Perplexity {
  double ppl = 0;
  double se = 0;
};
Perplexity perplexity(std::span<const double> nll);

}  // namespace tq::eval
