#include "serve/job.h"

#include <utility>

namespace tq::serve {

uint64_t Job::seed_of(int choice) const {
  if (choice == 0) return gen.sampling.seed;
  uint64_t z = gen.sampling.seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(choice);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;  // splitmix64's finaliser
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void Job::init_locked() {
  if (out_.choices.empty()) out_.choices.resize(static_cast<size_t>(n));
}

void Job::append(int choice, const std::string& text, TokenLogprob* lp) {
  if (text.empty() && lp == nullptr) return;
  {
    std::lock_guard lock(mu_);
    init_locked();
    auto& c = out_.choices[static_cast<size_t>(choice)];
    c.text += text;
    if (lp != nullptr) c.logprobs.push_back(std::move(*lp));
    news_ = true;
  }
  if (stream) cv_.notify_all();  // a waiter for the end only is not woken per token
}

void Job::finish_choice(int choice, std::string reason, int64_t completion_tokens) {
  {
    std::lock_guard lock(mu_);
    init_locked();
    auto& c = out_.choices[static_cast<size_t>(choice)];
    c.done = true;
    c.finish_reason = std::move(reason);
    c.completion_tokens = completion_tokens;
    out_.completion_tokens += completion_tokens;
    news_ = true;
  }
  if (stream) cv_.notify_all();
}

void Job::finish(std::string reason, const JobTimings& t, std::string error) {
  {
    std::lock_guard lock(mu_);
    init_locked();
    out_.done = true;
    out_.finish_reason = std::move(reason);
    out_.error = std::move(error);
    out_.timings = t;
    out_.cached_tokens = cached;
  }
  cv_.notify_all();
}

JobOutput Job::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  init_locked();
  cv_.wait_for(lock, timeout, [&] { return out_.done || (stream && news_); });
  JobOutput r = out_;
  for (auto& c : out_.choices) {
    c.text.clear();
    c.logprobs.clear();
  }
  news_ = false;
  return r;
}

}  // namespace tq::serve
