#include "eval/paired.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace tq::eval {

MeanSe mean_se(const std::vector<double>& x) {
  MeanSe r;
  const size_t n = x.size();
  if (n == 0) return r;
  for (double v : x) r.mean += v;
  r.mean /= double(n);
  if (n < 2) return r;
  double ss = 0;
  for (double v : x) ss += (v - r.mean) * (v - r.mean);
  r.se = std::sqrt(ss / double(n - 1)) / std::sqrt(double(n));
  return r;
}

double mcnemar_exact_p(int64_t b, int64_t c) {
  const int64_t n = b + c, k = std::min(b, c);
  if (n == 0) return 1.0;
  // 2 * P(X <= k), X ~ Binomial(n, 1/2), summed in log space.
  double p = 0;
  for (int64_t i = 0; i <= k; ++i)
    p += std::exp(std::lgamma(double(n + 1)) - std::lgamma(double(i + 1)) -
                  std::lgamma(double(n - i + 1)) - double(n) * std::log(2.0));
  return std::min(1.0, 2 * p);
}

PairedDiff paired_diff(const std::vector<bool>& base, const std::vector<bool>& cand, int resamples,
                       uint64_t seed) {
  PairedDiff r;
  const size_t n = std::min(base.size(), cand.size());
  r.n = int64_t(n);
  if (n == 0) return r;
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) {
    r.base += base[i];
    r.cand += cand[i];
    r.lost += base[i] && !cand[i];
    r.gained += !base[i] && cand[i];
    d[i] = double(cand[i]) - double(base[i]);
  }
  r.base /= double(n);
  r.cand /= double(n);
  r.diff = r.cand - r.base;
  r.se = mean_se(d).se;
  r.mcnemar_p = mcnemar_exact_p(r.lost, r.gained);
  std::mt19937_64 rng(seed);
  std::vector<double> means(size_t(std::max(resamples, 1)));
  for (double& m : means) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += d[rng() % n];
    m = s / double(n);
  }
  std::sort(means.begin(), means.end());
  auto at = [&](double q) {
    return means[std::min(means.size() - 1, size_t(q * double(means.size() - 1) + 0.5))];
  };
  r.ci_lo = at(0.025);
  r.ci_hi = at(0.975);
  return r;
}

}  // namespace tq::eval
