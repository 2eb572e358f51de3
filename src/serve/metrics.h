// Counters the server exposes at GET /metrics (Prometheus text format, version 0.0.4). The
// scheduler and the HTTP threads update them; the sums equal those of the responses.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace tq::serve {

struct Metrics {
  std::atomic<int64_t> running{0};   // sequences admitted, not finished
  std::atomic<int64_t> waiting{0};   // queued, not admitted
  std::atomic<int64_t> kv_bytes{0};  // bytes of the running sequences' KV caches
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> generation_tokens{0};
  std::atomic<int64_t> steps{0};      // batched forward passes
  std::atomic<int64_t> step_rows{0};  // tokens they carried
  static constexpr std::array<std::string_view, 4> kFinish = {"stop", "length", "cancelled",
                                                              "error"};
  std::array<std::atomic<int64_t>, 4> finished{};  // per kFinish
  static constexpr std::array<int, 9> kStatus = {200, 400, 401, 404, 405, 413, 429, 500, 503};
  std::array<std::atomic<int64_t>, 10> http{};  // per kStatus, then any other

  void count_finish(std::string_view reason);
  void count_http(int status);
  std::string prometheus() const;
};

}  // namespace tq::serve
