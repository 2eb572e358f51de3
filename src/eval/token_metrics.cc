#include "eval/token_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tq::eval {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

float max_of(std::span<const float> x) {
  float m = x[0];
  for (float v : x) m = v > m ? v : m;
  return m;
}

// sum_i exp(x_i - m) in f64; `m` is the maximum, so every term is at most 1.
double shifted_exp_sum(std::span<const float> x, float m) {
  double s = 0;
  for (float v : x) s += std::exp(v - m);
  return s;
}

// log of the softmax mass of every token not among `ids`, given the row's max and logsumexp.
// `mask` is a vocab-sized scratch of zeros and is left zeroed.
double rest_log_mass(std::span<const float> x, float m, double lse, std::span<const int32_t> ids,
                     std::vector<uint8_t>& mask) {
  mask.resize(x.size(), 0);
  for (int32_t id : ids) mask[id] = 1;
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (!mask[i]) s += std::exp(x[i] - m);
  for (int32_t id : ids) mask[id] = 0;
  return s > 0 ? std::log(s) + m - lse : -kInf;
}

// p * (lp - lq), with the p = 0 terms dropped (they are 0 even when lq = -inf).
inline double kl_term(double p, double lp, double lq) { return p > 0 ? p * (lp - lq) : 0.0; }

}  // namespace

double logsumexp(std::span<const float> x) {
  float m = max_of(x);
  if (std::isinf(m)) return m;
  return m + std::log(shifted_exp_sum(x, m));
}

double token_nll(std::span<const float> logits, int32_t target) {
  return logsumexp(logits) - double(logits[target]);
}

int32_t argmax(std::span<const float> x) {
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = int32_t(i);
  return best;
}

TokenCompare compare_rows(std::span<const float> base, std::span<const float> cand,
                          int32_t target) {
  const size_t n = base.size();
  TokenCompare r;
  // Pass 1: argmax and the two largest base values, argmax of the candidate.
  float b1 = base[0], b2 = -std::numeric_limits<float>::infinity(), c1 = cand[0];
  int32_t ib = 0, ic = 0;
  for (size_t i = 1; i < n; ++i) {
    float v = base[i];
    if (v > b1) {
      b2 = b1;
      b1 = v;
      ib = int32_t(i);
    } else if (v > b2) {
      b2 = v;
    }
    if (cand[i] > c1) {
      c1 = cand[i];
      ic = int32_t(i);
    }
  }
  r.argmax_base = ib;
  r.argmax_cand = ic;
  r.base_gap = n > 1 ? b1 - b2 : 0.0f;
  // Pass 2: partition functions. Pass 3: sum_i e_i * (log p_i - log q_i) / sum_i e_i.
  thread_local std::vector<float> eb;  // [n] exp(base - max)
  eb.resize(n);
  double sb = 0, sc = 0;
  for (size_t i = 0; i < n; ++i) {
    eb[i] = std::exp(base[i] - b1);
    sb += eb[i];
    sc += std::exp(cand[i] - c1);
  }
  const double lse_b = b1 + std::log(sb), lse_c = c1 + std::log(sc);
  double acc = 0;
  for (size_t i = 0; i < n; ++i)
    acc += kl_term(eb[i], double(base[i]) - lse_b, double(cand[i]) - lse_c);
  r.kl = acc / sb;
  r.nll_base = lse_b - double(base[target]);
  r.nll_cand = lse_c - double(cand[target]);
  return r;
}

TopKRow make_topk_row(std::span<const float> logits, int32_t target, int k) {
  const int32_t n = int32_t(logits.size());
  k = std::clamp(k, 1, n);
  thread_local std::vector<int32_t> order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + std::min(k + 1, n), order.end(), before);
  TopKRow r;
  r.ids.assign(order.begin(), order.begin() + k);
  for (int32_t id : r.ids) r.logits.push_back(logits[id]);
  float m = logits[order[0]];
  r.lse = m + std::log(shifted_exp_sum(logits, m));
  thread_local std::vector<uint8_t> mask;
  r.log_rest = rest_log_mass(logits, m, r.lse, r.ids, mask);
  r.gap = n > 1 ? logits[order[0]] - logits[order[1]] : 0.0f;
  r.nll = r.lse - double(logits[target]);
  return r;
}

TokenCompare compare_topk(const TopKRow& base, std::span<const float> cand, int32_t target) {
  TokenCompare r;
  r.argmax_base = base.ids[0];
  r.argmax_cand = argmax(cand);
  r.base_gap = base.gap;
  float m = cand[r.argmax_cand];
  double lse_c = m + std::log(shifted_exp_sum(cand, m));
  thread_local std::vector<uint8_t> mask;
  double rest_c = rest_log_mass(cand, m, lse_c, base.ids, mask);
  double acc = 0;
  for (size_t i = 0; i < base.ids.size(); ++i) {
    double lp = double(base.logits[i]) - base.lse;
    acc += kl_term(std::exp(lp), lp, double(cand[base.ids[i]]) - lse_c);
  }
  acc += kl_term(std::exp(base.log_rest), base.log_rest, rest_c);
  r.kl = acc;
  r.nll_base = base.nll;
  r.nll_cand = lse_c - double(cand[target]);
  return r;
}

double percentile_sorted(std::span<const double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  double pos = q / 100.0 * double(v.size() - 1);
  size_t lo = size_t(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  double t = pos - double(lo);
  return v[lo] + (v[hi] - v[lo]) * t;
}

Summary summarize(std::span<const double> v) {
  Summary s;
  s.n = int64_t(v.size());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (v.empty()) {
    s.mean = s.std = s.median = s.p90 = s.p99 = s.max = nan;
    return s;
  }
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.std = v.size() > 1 ? std::sqrt(ss / double(v.size() - 1)) : nan;
  std::vector<double> sorted(v.begin(), v.end());
  std::sort(sorted.begin(), sorted.end());
  s.median = percentile_sorted(sorted, 50);
  s.p90 = percentile_sorted(sorted, 90);
  s.p99 = percentile_sorted(sorted, 99);
  s.max = sorted.back();
  return s;
}

Perplexity perplexity(std::span<const double> nll) {
  Summary s = summarize(nll);
  Perplexity p;
  p.ppl = std::exp(s.mean);
  p.se = p.ppl * s.std / std::sqrt(double(s.n));
  return p;
}

}  // namespace tq::eval
