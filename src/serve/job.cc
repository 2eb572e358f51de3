#include "serve/job.h"

#include <utility>

namespace tq::serve {

void Job::append(const std::string& text) {
  if (text.empty()) return;
  {
    std::lock_guard lock(mu_);
    out_.text += text;
  }
  if (stream) cv_.notify_all();  // a waiter for the end only is not woken per token
}

void Job::finish(std::string reason, int64_t completion_tokens, const JobTimings& t,
                 std::string error) {
  {
    std::lock_guard lock(mu_);
    out_.done = true;
    out_.finish_reason = std::move(reason);
    out_.error = std::move(error);
    out_.completion_tokens = completion_tokens;
    out_.timings = t;
  }
  cv_.notify_all();
}

JobOutput Job::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return out_.done || (stream && !out_.text.empty()); });
  JobOutput r = out_;
  out_.text.clear();
  return r;
}

}  // namespace tq::serve
