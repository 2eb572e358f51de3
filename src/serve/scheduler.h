// The thread that owns the model. Each step it decodes one token for every running sequence
// and prefills waiting prompts in chunks, all in ONE Transformer::forward_batch call (each
// weight read once for every sequence), within a token budget so running streams keep flowing
// while a long prompt is admitted. First come, first served.
//
// A sequence's tokens depend only on its own request: its own sampler and RNG, and prefill
// chunks cut at multiples of prefill_chunk from position 0, whatever runs beside it.
// A request with `n` choices prefills once; its other choices fork from that sequence.
// KV memory: a request is admitted when the blocks of its prompt + generation ceiling (times
// its choices) fit beside those the running sequences hold; each sequence's cache has exactly
// its blocks, allocated at admission and freed when it ends (one pool of counted blocks; the
// blocks of one sequence are contiguous).
// With a prompt cache: at admission the leading full blocks of the prompt found in the cache
// are copied into the sequence's cache (copied, not shared: a sequence's blocks are one
// contiguous allocation) and the rest is prefilled; when its prefill ends, its full prompt
// blocks go into the cache. Cached blocks count against the same KV budget and are evicted
// (least recently used) before a request would wait for them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "model/forward.h"
#include "model/speculate.h"
#include "serve/job.h"
#include "serve/metrics.h"
#include "serve/prefill_cap.h"
#include "serve/prompt_cache.h"
#include "text/tokenizer.h"

namespace tq::serve {

// KV memory is counted in blocks of this many positions (the fast runtime's key layout).
inline constexpr int64_t kKvBlock = 16;
inline int64_t kv_blocks_for(int64_t positions) { return (positions + kKvBlock - 1) / kKvBlock; }

struct SchedulerOptions {
  int max_seqs = 4;             // sequences running at once
  int batch = 0;                // sequences per step (0: max_seqs); 1: the strict serial executor
  int queue = 16;               // requests waiting beyond the free running slots
  int64_t prefill_chunk = 128;  // prompt tokens per sequence per step
  int64_t step_tokens = 256;    // tokens per step (decode rows + prefill), one chunk at least
  int64_t kv_blocks = 0;        // KV blocks all sequences may hold together (0: no limit)
  // While sequences decode, a step's prefill tokens are capped so that the step takes at most
  // this many times a decode-only step (measured); 0: whole chunks within step_tokens.
  double max_itl_factor = 2.0;
  // A prompt of at most this many tokens (past its cached prefix) goes in whole chunks whatever
  // the cap: a chat turn's first token is not held to the streams' pace; a longer one is capped.
  int64_t prefill_burst = 512;
  bool log = true;  // one line per finished request on stderr
  // Speculative decoding: each sequence's proposer (null: none). Decode rows then carry their
  // proposals as per_token rows; a sequence's tokens stay those of plain decoding.
  SpeculatorFactory speculate;
  PromptCache* prompt_cache = nullptr;  // not owned; null: none
};

class Scheduler {
 public:
  Scheduler(const Transformer& model, const Tokenizer& tok, SchedulerOptions o, Metrics& m);
  ~Scheduler();

  // False when the queue is full (the caller answers 429).
  bool submit(std::shared_ptr<Job> job);
  // Nothing running or waiting.
  bool idle() const;
  // Ends every job still running or waiting (finish reason "cancelled") and joins the thread.
  void shutdown();

 private:
  struct Seq;
  void run();
  void step(std::vector<std::unique_ptr<Seq>>& running);
  // Samples s's next token from `row` (its logits) and hands the text on; returns the token.
  int32_t emit(Seq& s, std::span<float> row);
  void emit(Seq& s);
  // Gives s a proposer when the server speculates (its logits room for every checked row).
  void speculate(Seq& s);
  // A decode row that checked proposals: its rows taken in order until one differs.
  void take_checked_rows(Seq& s, double step_s);
  void retire(Seq& s, const char* reason, std::string error = {});
  void end_job(Job& j, const char* reason, std::string error = {});
  void reuse_cached(Seq& s);   // at admission: the prompt's cached blocks into its cache
  void store_cached(Seq& s);   // at the end of its prefill: its full prompt blocks into the cache
  int64_t cache_room() const;  // blocks the prompt cache may hold now
  static GenerationOptions choice_options(const Job& j, int choice);

  const Transformer& model_;
  size_t vocab_;
  const Tokenizer& tok_;
  SchedulerOptions o_;
  Metrics& m_;
  int max_running_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> waiting_;
  int64_t running_count_ = 0;
  int64_t blocks_used_ = 0;  // scheduler thread only
  bool stop_ = false;
  std::thread thread_;
  std::vector<float> scratch_;  // raw logits for log-probabilities
  PrefillCap cap_;              // scheduler thread
};

}  // namespace tq::serve
