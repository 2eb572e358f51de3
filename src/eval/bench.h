// Speed of a loaded model (tq bench): prefill and decode throughput, time to first token and
// peak RSS at chosen prompt lengths, min/median/max over repeats, beside the memory-bandwidth
// roofline of decode (bytes read per token over the bandwidth a streaming read achieves).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "kernels/cpu_info.h"
#include "model/forward.h"

namespace tq::eval {

struct BenchOptions {
  std::vector<int64_t> prompt_lengths = {128, 512, 2048};
  int64_t gen = 128;  // decode steps after each prefill
  int repeat = 3;     // runs per prompt length
  uint64_t seed = 0;  // prompt token ids are drawn uniformly from the vocabulary
};

struct Spread {
  double min = 0, median = 0, max = 0;
};
Spread spread(std::vector<double> v);  // v non-empty

struct BenchPoint {
  int64_t prompt_len = 0;
  Spread prefill_tok_s, decode_tok_s, ttft_s;
};

struct BenchResult {
  std::vector<BenchPoint> points;
  uint64_t peak_rss_bytes = 0;
  uint64_t bytes_per_token = 0;  // weights read per decode step
  double bandwidth_bytes_s = 0;  // measured streaming read
  double roofline_tok_s = 0;     // bandwidth / bytes_per_token
  std::string runtime;
  CpuInfo cpu;
};

// `progress(done, total)` after every run.
Result<BenchResult> run_bench(const Transformer& t, const BenchOptions& o,
                              std::function<void(int64_t, int64_t)> progress = nullptr);

// Bytes per second of `threads` threads summing disjoint parts of a buffer of `bytes` (larger
// than the last-level cache) as streams with software prefetch, as the decode kernels read
// weights; best of three passes after one untimed pass that faults the pages in.
double measure_read_bandwidth(int threads, uint64_t bytes = uint64_t{1} << 30);

// The --json object: prefill_tok_s / decode_tok_s / ttft_s are the medians at the first prompt
// length; "points" holds min/median/max per length.
nlohmann::json bench_json(const BenchResult& r, const BenchOptions& o);

// {"vendor", "model", "family", "model_number", "simd", "int8", "amx"}: the CPU and the kernel
// paths dispatched on it.
nlohmann::json cpu_json(const CpuInfo& c);

}  // namespace tq::eval
