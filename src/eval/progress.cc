#include "eval/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace tq::eval {
namespace {

std::string mmss(double s) {
  int64_t t = int64_t(s + 0.5);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

}  // namespace

ProgressLine::ProgressLine(std::string label, int64_t tokens_per_step, bool enabled,
                           std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      tokens_per_step_(tokens_per_step),
      enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) == 1),
      start_(Clock::now()),
      last_print_(start_) {}

double ProgressLine::elapsed_s() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void ProgressLine::update(int64_t done, int64_t total) {
  if (!enabled_) return;
  auto now = Clock::now();
  double el = elapsed_s();
  bool last = done == total;
  if (!tty_ && !last && done != 1 && now - last_print_ < std::chrono::seconds(10)) return;
  last_print_ = now;
  double steps = el > 0 ? double(done) / el : 0;
  double eta = done > 0 ? el * double(total - done) / double(done) : 0;
  std::string rate = tokens_per_step_ > 0
                         ? fmt::format("{:.0f} tok/s", steps * double(tokens_per_step_))
                         : fmt::format("{:.2f} {}/s", steps, unit_);
  std::string line = fmt::format("{}: {}/{} {}, {}, {} elapsed, ETA {}", label_, done, total, unit_,
                                 rate, mmss(el), mmss(eta));
  if (tty_) {
    std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), last ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace tq::eval
