// Progress of a long measurement on stderr: one rewritten line with rate and ETA on a terminal,
// plain lines (first window, then every 10 s, then the last) otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tq::eval {

class ProgressLine {
 public:
  // `tokens_per_step`: tokens fed per step, for the tok/s figure; 0: the rate is steps per
  // second, and `unit` names the steps.
  ProgressLine(std::string label, int64_t tokens_per_step, bool enabled = true,
               std::string unit = "windows");
  void update(int64_t done, int64_t total);
  double elapsed_s() const;

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_, unit_;
  int64_t tokens_per_step_;
  bool enabled_, tty_;
  Clock::time_point start_, last_print_;
};

}  // namespace tq::eval
