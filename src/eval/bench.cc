#include "eval/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "base/proc_memory.h"
#include "kernels/sampling.h"
#include "kernels/vec_ops.h"

namespace tq::eval {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Spread s;
  s.min = v.front();
  s.max = v.back();
  const size_t n = v.size();
  s.median = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return s;
}

double measure_read_bandwidth(int threads, uint64_t bytes) {
  threads = std::max(threads, 1);
  const size_t n = static_cast<size_t>(bytes / sizeof(float));
  std::vector<float> buf(n, 1.0f);  // written once: every page is resident
  std::vector<double> sink(static_cast<size_t>(threads));
  auto pass = [&] {
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; ++i)
      ts.emplace_back([&, i] {
        const size_t b = n * i / threads, e = n * (i + 1) / threads;
        sink[static_cast<size_t>(i)] += stream_sum_f32(buf.data() + b, int64_t(e - b));
      });
    for (auto& t : ts) t.join();
  };
  pass();  // warm: caches and TLB in a steady state
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    pass();
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds_since(t0));
  }
  return best;
}

Result<BenchResult> run_bench(const Transformer& t, const BenchOptions& o,
                              std::function<void(int64_t, int64_t)> progress) {
  if (o.prompt_lengths.empty()) return err("bench: no prompt lengths");
  if (o.gen < 1) return err("bench: --gen must be >= 1, got {}", o.gen);
  if (o.repeat < 1) return err("bench: --repeat must be >= 1, got {}", o.repeat);
  for (int64_t len : o.prompt_lengths)
    if (len < 1) return err("bench: prompt length {} is not positive", len);
  const int64_t vocab = t.config().vocab_size;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<float> logits(static_cast<size_t>(vocab));
  BenchResult r;
  r.runtime = t.runtime_name();
  r.cpu = cpu_info();
  {  // Warm-up, untimed: faults the mapped weights in and grows the scratch buffers.
    KvCache warm = t.new_cache(9);
    std::vector<int32_t> p(8);
    for (auto& id : p) id = tok(rng);
    TQ_CHECK_OK(t.forward(p, warm, logits, false));
    TQ_CHECK_OK(t.forward(std::span<const int32_t>(p.data(), 1), warm, logits, false));
  }
  const int64_t total = static_cast<int64_t>(o.prompt_lengths.size()) * o.repeat;
  int64_t done = 0;
  for (int64_t len : o.prompt_lengths) {
    std::vector<double> pre, dec, ttft;
    KvCache cache = t.new_cache(len + o.gen);
    for (int rep = 0; rep < o.repeat; ++rep) {
      std::vector<int32_t> prompt(static_cast<size_t>(len));
      for (auto& id : prompt) id = tok(rng);
      cache.clear();
      const auto t0 = Clock::now();
      TQ_CHECK_OK(t.forward(prompt, cache, logits, /*all_logits=*/false));
      int32_t next = argmax(logits);
      const double first = seconds_since(t0);
      const auto t1 = Clock::now();
      for (int64_t i = 0; i < o.gen; ++i) {
        TQ_CHECK_OK(t.forward(std::span<const int32_t>(&next, 1), cache, logits, false));
        next = argmax(logits);
      }
      const double gen_s = seconds_since(t1);
      pre.push_back(static_cast<double>(len) / first);
      ttft.push_back(first);
      dec.push_back(static_cast<double>(o.gen) / gen_s);
      if (progress) progress(++done, total);
    }
    r.points.push_back({len, spread(pre), spread(dec), spread(ttft)});
  }
  r.peak_rss_bytes = peak_resident_bytes();
  r.bytes_per_token = t.bytes_per_token();
  r.bandwidth_bytes_s = measure_read_bandwidth(t.threads());
  r.roofline_tok_s =
      r.bandwidth_bytes_s / static_cast<double>(std::max<uint64_t>(r.bytes_per_token, 1));
  return r;
}

nlohmann::json bench_json(const BenchResult& r, const BenchOptions& o) {
  auto sj = [](const Spread& s) {
    return nlohmann::json{{"min", s.min}, {"median", s.median}, {"max", s.max}};
  };
  nlohmann::json points = nlohmann::json::array();
  for (const BenchPoint& p : r.points)
    points.push_back({{"prompt_len", p.prompt_len},
                      {"prefill_tok_s", sj(p.prefill_tok_s)},
                      {"decode_tok_s", sj(p.decode_tok_s)},
                      {"ttft_s", sj(p.ttft_s)}});
  const BenchPoint& f = r.points.front();
  return {{"prefill_tok_s", f.prefill_tok_s.median},
          {"decode_tok_s", f.decode_tok_s.median},
          {"ttft_s", f.ttft_s.median},
          {"peak_rss_bytes", r.peak_rss_bytes},
          {"bytes_per_token", r.bytes_per_token},
          {"bandwidth_bytes_s", r.bandwidth_bytes_s},
          {"roofline_decode_tok_s", r.roofline_tok_s},
          {"gen", o.gen},
          {"repeat", o.repeat},
          {"runtime", r.runtime},
          {"cpu", cpu_json(r.cpu)},
          {"points", points}};
}

nlohmann::json cpu_json(const CpuInfo& c) {
  return {{"vendor", c.vendor}, {"model", c.model},
          {"family", c.family}, {"model_number", c.model_number},
          {"simd", c.simd},     {"int8", c.int8},
          {"amx", c.amx}};
}

}  // namespace tq::eval
