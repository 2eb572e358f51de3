// Next-token choice from f32 logits: greedy, or temperature sampling restricted by top-p
// (nucleus), min-p and top-k, with the filters of mlx-lm's make_sampler; and the logit
// adjustments of OpenAI's API (presence/frequency penalties, logit_bias) applied before it.
//
// Semantics (as mlx-lm): top-p, min-p and top-k select on the untempered distribution
// softmax(logits); top-p keeps the most probable tokens whose total mass reaches top_p (every
// token tied with the last one kept stays), min-p those with p >= min_p * p_max, then top-k
// keeps the k most probable of those; the draw is from softmax(logits / temperature)
// renormalized over the survivors.
//
// Determinism: one std::mt19937_64 seeded with `seed`; each sampled token consumes exactly one
// 64-bit draw u, used as (u >> 11) * 2^-53 in [0, 1) against the cumulative weights in
// descending-logit order (ties by lower token id). The same seed, logits and options give
// the same tokens on every platform. Greedy decoding draws nothing.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "base/result.h"

namespace tq {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (argmax)
  double top_p = 1.0;        // in (0, 1]; 1: off
  int64_t top_k = 0;         // 0: off
  uint64_t seed = 0;
  double min_p = 0.0;  // in [0, 1]; 0: off
};

// An error naming the bad option (negative temperature, top_p outside (0, 1], top_k < 0,
// min_p outside [0, 1]).
Status validate(const SamplingOptions& o);

// OpenAI's logit adjustments: logit[t] -= count[t] * frequency + (count[t] > 0) * presence,
// where count is how often t was generated so far, then logit[t] += bias[t].
struct LogitAdjust {
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  std::vector<std::pair<int32_t, float>> bias;  // (token id, added to its logit)
  bool active() const { return presence_penalty != 0 || frequency_penalty != 0 || !bias.empty(); }
};

// `counts` holds (token id, times generated) for every token generated so far.
void adjust_logits(std::span<float> logits, const LogitAdjust& a,
                   std::span<const std::pair<int32_t, int32_t>> counts);

// The index of the largest logit; the lowest index among equal maxima (as mx.argmax). NaN
// logits never win.
int32_t argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o);
  int32_t next(std::span<const float> logits);

 private:
  SamplingOptions o_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // token ids by descending logit
  std::vector<double> weight_;  // per kept rank
};

}  // namespace tq
