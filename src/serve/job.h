// One admitted request as the scheduler and the HTTP thread that waits for it share it: the
// scheduler appends each choice's text (and log-probabilities when asked) and finally marks it
// done; the HTTP side reads what is new and may cancel it (a closed connection), which the
// scheduler honours at its next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
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
  // Speculative decoding (all choices): decode forwards, proposals checked, accepted.
  int64_t spec_steps = 0, spec_proposed = 0, spec_accepted = 0;
};

// A generated token's log-probability under the model (its raw logits, before temperature,
// penalties and bias) and the most probable alternatives at its position.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most probable first
};

// What one choice produced since the HTTP side last looked.
struct ChoiceOutput {
  std::string text;                    // new final text
  std::vector<TokenLogprob> logprobs;  // new tokens' log-probabilities (when asked)
  bool done = false;
  std::string finish_reason;  // "stop", "length", "cancelled", "error"
  int64_t completion_tokens = 0;
};

// What a job produced so far; `done` once every choice is.
struct JobOutput {
  std::vector<ChoiceOutput> choices;
  bool done = false;
  std::string finish_reason;      // the job's: "error" or "cancelled" when any choice ended so
  std::string error;              // when finish_reason is "error" or "cancelled"
  int64_t completion_tokens = 0;  // all choices together
  int64_t cached_tokens = 0;      // prompt tokens taken from the prompt cache
  JobTimings timings;
};

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  GenerationOptions gen;    // max_tokens already capped to the context
  int n = 1;                // choices, sharing one prefill
  int top_logprobs = -1;    // -1: no log-probabilities; k >= 0: the token's and k alternatives
  bool tool_calls = false;  // <tool_call> blocks of the answer become tool_calls
  Clock::time_point arrived = Clock::now();
  bool stream = false;  // the HTTP side wants each piece (else it waits for the end only)
  std::atomic<bool> cancelled{false};

  // Scheduler side only (its thread alone touches these).
  int choices_left = 0;
  int64_t generated = 0;   // tokens of the finished choices
  int64_t cached = 0;      // prompt tokens taken from the prompt cache
  double cache_ms = 0;     // looking them up (memory, disk) and copying them in
  std::string end_reason;  // the first abnormal end of a choice ("cancelled", "error"), if any
  std::string end_error;
  Clock::time_point admitted{}, first_token{};
  int64_t spec_steps = 0, spec_proposed = 0, spec_accepted = 0;

  // The sampler seed of choice i: choice 0 keeps the request's, so `n` does not change it.
  uint64_t seed_of(int choice) const;

  // Scheduler side.
  void append(int choice, const std::string& text, TokenLogprob* lp = nullptr);
  void finish_choice(int choice, std::string reason, int64_t completion_tokens);
  // The job is over (every choice finished, or an error / cancellation ends the rest).
  void finish(std::string reason, const JobTimings& t, std::string error = {});

  // HTTP side: waits up to `timeout` for something new or the end; returns what is new (moved
  // out of the job).
  JobOutput take(std::chrono::milliseconds timeout);

 private:
  void init_locked();
  std::mutex mu_;
  std::condition_variable cv_;
  JobOutput out_;
  bool news_ = false;
};

}  // namespace tq::serve
