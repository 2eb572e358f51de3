#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tq {

Status validate(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    return err("--temp must be a finite number >= 0, got {}", o.temperature);
  if (!(o.top_p > 0.0 && o.top_p <= 1.0)) return err("--top-p must be in (0, 1], got {}", o.top_p);
  if (o.top_k < 0) return err("--top-k must be >= 0, got {}", o.top_k);
  if (!(o.min_p >= 0.0 && o.min_p <= 1.0)) return err("--min-p must be in [0, 1], got {}", o.min_p);
  return ok_status();
}

void adjust_logits(std::span<float> logits, const LogitAdjust& a,
                   std::span<const std::pair<int32_t, int32_t>> counts) {
  const auto n = static_cast<int64_t>(logits.size());
  if (a.presence_penalty != 0 || a.frequency_penalty != 0) {
    for (const auto& [id, c] : counts) {
      if (id < 0 || id >= n || c <= 0) continue;
      logits[static_cast<size_t>(id)] -=
          static_cast<float>(c * a.frequency_penalty + a.presence_penalty);
    }
  }
  for (const auto& [id, b] : a.bias)
    if (id >= 0 && id < n) logits[static_cast<size_t>(id)] += b;
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  float bv = -std::numeric_limits<float>::infinity();
  bool found = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    float v = logits[i];
    if (std::isnan(v)) continue;
    if (!found || v > bv) {
      bv = v;
      best = static_cast<int32_t>(i);
      found = true;
    }
  }
  return best;
}

Sampler::Sampler(const SamplingOptions& o) : o_(o), rng_(o.seed) {}

int32_t Sampler::next(std::span<const float> logits) {
  if (o_.temperature == 0.0 || logits.size() <= 1) return argmax(logits);
  const size_t n = logits.size();
  auto value = [&](int32_t i) {  // NaN sorts last and weighs nothing
    float v = logits[static_cast<size_t>(i)];
    return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
  };
  order_.resize(n);
  for (size_t i = 0; i < n; ++i) order_[i] = static_cast<int32_t>(i);
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    float va = value(a), vb = value(b);
    return va > vb || (va == vb && a < b);
  });
  const double top = value(order_[0]);
  if (!std::isfinite(top)) return order_[0];  // no finite logit: nothing to sample from

  size_t keep = n;
  if (o_.top_p < 1.0) {
    double total = 0.0;
    for (size_t r = 0; r < n; ++r) total += std::exp(value(order_[r]) - top);
    double mass = 0.0;
    for (size_t r = 0; r < n; ++r) {
      mass += std::exp(value(order_[r]) - top);
      if (mass >= o_.top_p * total) {
        keep = r + 1;
        break;
      }
    }
    while (keep < n && value(order_[keep]) == value(order_[keep - 1])) ++keep;
  }
  if (o_.min_p > 0.0) {  // p >= min_p * p_max  <=>  logit >= top + log(min_p)
    const double floor = top + std::log(o_.min_p);
    size_t r = 1;
    while (r < keep && value(order_[r]) >= floor) ++r;
    keep = r;
  }
  if (o_.top_k > 0 && static_cast<size_t>(o_.top_k) < keep) keep = static_cast<size_t>(o_.top_k);

  weight_.resize(keep);
  double sum = 0.0;
  for (size_t r = 0; r < keep; ++r) {
    sum += std::exp((value(order_[r]) - top) / o_.temperature);
    weight_[r] = sum;  // cumulative
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
  for (size_t r = 0; r < keep; ++r)
    if (u < weight_[r]) return order_[r];
  return order_[keep - 1];
}

}  // namespace tq
