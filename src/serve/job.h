// One admitted request as the scheduler and the HTTP thread that waits for it share it: the
// scheduler appends text and finally marks it done; the HTTP side reads what is new and may
// cancel it (a closed connection), which the scheduler honours at its next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "model/generation.h"

namespace tq::serve {

using Clock = std::chrono::steady_clock;

// Milliseconds per phase, as the response's `timings` object reports them.
struct JobTimings {
  double queue_ms = 0;    // arrival to admission
  double prefill_ms = 0;  // admission to the first token's logits
  double decode_ms = 0;   // first token to the last
  double ttft_ms = 0;     // arrival to the first token
};

// What a job produced so far; `done` once the scheduler is finished with it.
struct JobOutput {
  std::string text;  // new final text not yet taken by the HTTP side
  bool done = false;
  std::string finish_reason;  // "stop", "length", "cancelled", "error"
  std::string error;          // when finish_reason is "error"
  int64_t completion_tokens = 0;
  JobTimings timings;
};

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  GenerationOptions gen;  // max_tokens already capped to the context
  Clock::time_point arrived = Clock::now();
  bool stream = false;  // the HTTP side wants each piece (else it waits for the end only)
  std::atomic<bool> cancelled{false};

  // Scheduler side.
  void append(const std::string& text);
  void finish(std::string reason, int64_t completion_tokens, const JobTimings& t,
              std::string error = {});

  // HTTP side: waits up to `timeout` for new text or the end; returns what is new (text moved
  // out of the job) and whether it is done.
  JobOutput take(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  JobOutput out_;
};

}  // namespace tq::serve
