// Counters the server exposes at GET /metrics (Prometheus text format, version 0.0.4). The
// scheduler and the HTTP threads update them; the sums equal those of the responses.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "serve/prompt_cache.h"

namespace tq::serve {

// A Prometheus histogram of seconds with fixed buckets (cumulative counts are written out).
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32,
                                                     0.64,  1.28, 2.56, 5.12, 10.0, 20.0, 60.0};
  void observe(double seconds);
  void write(std::string& out, std::string_view name, std::string_view help) const;
  int64_t count() const { return count_.load(); }

 private:
  std::array<std::atomic<int64_t>, kBounds.size() + 1> buckets_{};  // the last: +Inf only
  std::atomic<int64_t> count_{0};
  std::atomic<int64_t> sum_us_{0};
};

struct Metrics {
  std::atomic<int64_t> running{0};   // sequences admitted, not finished
  std::atomic<int64_t> waiting{0};   // queued, not admitted
  std::atomic<int64_t> kv_bytes{0};  // bytes of the running sequences' KV caches
  std::atomic<int64_t> kv_blocks_used{0};
  std::atomic<int64_t> kv_blocks_total{0};  // 0: no limit
  std::atomic<int64_t> memory_budget{0};    // bytes
  std::atomic<int64_t> memory_fixed{0};     // of which weights, scratch and margins
  std::atomic<int64_t> kv_block_bytes{0};
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> generation_tokens{0};
  std::atomic<int64_t> steps{0};              // batched forward passes
  std::atomic<int64_t> step_rows{0};          // tokens they carried
  std::atomic<int64_t> prefill_allowance{0};  // prompt tokens a step may carry beside decode rows
  std::atomic<int64_t> spec_checks{0};        // decode rows that checked proposals
  std::atomic<int64_t> spec_proposed{0};      // proposals checked
  std::atomic<int64_t> spec_accepted{0};      // of them, taken
  static constexpr std::array<std::string_view, 4> kFinish = {"stop", "length", "cancelled",
                                                              "error"};
  std::array<std::atomic<int64_t>, 4> finished{};  // per kFinish
  static constexpr std::array<int, 10> kStatus = {200, 400, 401, 404, 405, 408, 413, 429, 500, 503};
  std::array<std::atomic<int64_t>, 11> http{};  // per kStatus, then any other
  Histogram ttft;                               // arrival to first token, per request that got one
  Histogram itl;                                // between consecutive tokens of a sequence
  Histogram queue_time;                       // arrival to admission (or to its end while waiting)
  const PromptCache* prompt_cache = nullptr;  // its counters, when the server has one

  void count_finish(std::string_view reason);
  void count_http(int status);
  std::string prometheus() const;
};

}  // namespace tq::serve
