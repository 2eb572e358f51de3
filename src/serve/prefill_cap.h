#pragma once
// How many prompt tokens a step may carry beside decode rows so that the step stays within
// --max-itl-factor times a decode-only step: a small controller fed the measured steps.
#include <cstdint>

namespace tq::serve {

class PrefillCap {
 public:
  // factor <= 0: no cap. max_tokens: the most a step carries anyway (step_tokens).
  PrefillCap(double factor, int64_t max_tokens) : factor_(factor), max_(max_tokens) {}

  // Tokens the next step with `decode_rows` decode rows may carry (max_tokens when uncapped or
  // not yet measured).
  int64_t allowance(int64_t decode_rows) const;

  // A step's measured seconds. A step without prompt tokens times the decode rows; one whose
  // prompt tokens all came under the cap (`capped`: no whole-chunk burst) teaches the prompt
  // tokens' cost: what they add = fixed + tokens × per-token, fitted over the last few steps.
  void record(int64_t decode_rows, int64_t prompt_tokens, double step_s, bool capped);

  double decode_row_s() const { return decode_row_s_; }

 private:
  double factor_;
  int64_t max_;
  double decode_row_s_ = 0.0;  // a decode-only step's seconds per row (running average)
  int64_t cap_ = 1;  // the allowance beside decode rows (one token until a capped step is timed)
  // Exponentially weighted sums over capped steps of (n, cost added): w, w·n, w·n², w·c, w·n·c.
  double s0_ = 0, s1_ = 0, s2_ = 0, y0_ = 0, y1_ = 0;
};

}  // namespace tq::serve
