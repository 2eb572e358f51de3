// Two models on the same items: the accuracy difference with its paired intervals and the
// items that flipped each way.
#pragma once

#include <cstdint>
#include <vector>

namespace tq::eval {

// Mean and the harness's standard error of a 0/1 (or any) per-item score: sample s.d. / sqrt(n).
struct MeanSe {
  double mean = 0, se = 0;
};
MeanSe mean_se(const std::vector<double>& x);

struct PairedDiff {
  int64_t n = 0;
  double base = 0, cand = 0;    // accuracies
  double diff = 0;              // cand - base
  double se = 0;                // s.d. of the per-item differences / sqrt(n)
  double ci_lo = 0, ci_hi = 0;  // 95% paired bootstrap percentile interval of diff
  int64_t lost = 0;             // base right, candidate wrong
  int64_t gained = 0;           // base wrong, candidate right
  double mcnemar_p = 1;         // exact two-sided McNemar (binomial on lost vs gained)
};

// `base[i]`, `cand[i]`: item i right on each arm. `resamples` bootstrap draws from `seed`.
PairedDiff paired_diff(const std::vector<bool>& base, const std::vector<bool>& cand,
                       int resamples = 2000, uint64_t seed = 0);

// Exact two-sided McNemar p-value for b and c discordant pairs.
double mcnemar_exact_p(int64_t b, int64_t c);

}  // namespace tq::eval
