#include "serve/prefill_cap.h"

#include <algorithm>
#include <cmath>

namespace tq::serve {

int64_t PrefillCap::allowance(int64_t decode_rows) const {
  if (factor_ <= 0 || decode_rows == 0 || decode_row_s_ <= 0) return max_;
  return cap_;
}

void PrefillCap::record(int64_t decode_rows, int64_t prompt_tokens, double step_s, bool capped) {
  if (prompt_tokens == 0) {
    if (decode_rows == 0) return;
    // A running average: the cost drifts with the rows' context and whatever else runs.
    const double v = step_s / static_cast<double>(decode_rows);
    decode_row_s_ = decode_row_s_ > 0 ? 0.8 * decode_row_s_ + 0.2 * v : v;
    return;
  }
  if (!capped || decode_rows == 0 || decode_row_s_ <= 0 || factor_ <= 0) return;
  const double n = static_cast<double>(prompt_tokens);
  const double decode_s = decode_row_s_ * static_cast<double>(decode_rows);
  // What the prompt tokens may add, aimed a little short: steps vary, and the promise is a
  // bound on each step, not on their mean.
  const double room = 0.85 * (factor_ - 1.0) * decode_s;
  const double added = std::max(step_s - decode_s, 1e-6);
  // A token's marginal cost: the slope of added = fixed + n · per-token fitted over the last ~7
  // steps once they differed in length enough to separate the two; else this step's cost per
  // token, an upper bound (the fixed part is spread over the tokens), so the cap errs short. A
  // step the fit mispredicts by 30% (another prompt, another load) starts the fit over.
  constexpr double kKeep = 0.85;
  auto fit = [&](double& slope, double& fixed) {
    const double var = s0_ * s2_ - s1_ * s1_;
    if (!(var > 0.2 * s0_ * s0_)) return false;
    slope = (s0_ * y1_ - s1_ * y0_) / var, fixed = (y0_ - slope * s1_) / s0_;
    return true;
  };
  double slope = 0, fixed = 0;
  if (fit(slope, fixed) && std::abs(fixed + n * slope - added) > 0.3 * added)
    s0_ = s1_ = s2_ = y0_ = y1_ = 0;
  s0_ = kKeep * s0_ + 1, s1_ = kKeep * s1_ + n, s2_ = kKeep * s2_ + n * n;
  y0_ = kKeep * y0_ + added, y1_ = kKeep * y1_ + n * added;
  const double upper = added / n;
  double per = upper;
  if (fit(slope, fixed) && slope > 0.05 * upper && slope <= upper) per = slope;
  // From this step's measured cost, add or drop tokens at the marginal cost.
  double next = n + std::floor((room - added) / per);
  next = std::min(next, 2 * n + 1);  // a noisy fit grows the cap by doubling at most
  cap_ = static_cast<int64_t>(std::clamp(next, 1.0, static_cast<double>(max_)));
}

}  // namespace tq::serve
