// Driven by tests/oracle/test_forward_logits.py: with TQ_FORWARD_MODEL and TQ_FORWARD_JOB set,
// loads the model, runs every token window of the job through Transformer::forward (a fresh
// cache each) and a greedy generation, and writes into TQ_FORWARD_OUT:
//   logits.f32   the windows' logits, concatenated rows [sum of lengths, vocab], raw f32 LE
//   result.json  {"vocab", "rows", "generated", "load_s", "prefill_s", "decode_s", "decode_rows"}
//   decode.f32   the "decode_windows" logits: each window's first "split" tokens in one call,
//                then one token per call through the cache ([len, vocab] rows per window)
// Job: {"windows": [[ids...], ...], "prompt": [ids...], "max_tokens": N,
//       "decode_windows": [[ids...], ...], "split": P, "fast": bool, "f32": bool} (all but
//       windows optional; "fast" runs the fast runtime, "f32" with f32 activations and cache).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../testing/test_files.h"
#include "model/forward.h"

namespace tq {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Index of the largest logit; the first one on ties (as mx.argmax / np.argmax).
int32_t argmax(std::span<const float> v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int32_t>(best);
}

TEST(ForwardOracle, WritesLogitsAndGreedyTokens) {
  const char* model = std::getenv("TQ_FORWARD_MODEL");
  const char* job_path = std::getenv("TQ_FORWARD_JOB");
  const char* out = std::getenv("TQ_FORWARD_OUT");
  if (!model || !*model || !job_path || !*job_path || !out || !*out)
    GTEST_SKIP() << "TQ_FORWARD_MODEL/TQ_FORWARD_JOB/TQ_FORWARD_OUT not set";
  nlohmann::json job = nlohmann::json::parse(testing::read_file(job_path));

  auto t0 = std::chrono::steady_clock::now();
  auto src = open_model(model);
  ASSERT_TRUE(src.ok()) << src.error().message;
  // "fast": the fast runtime instead of the reference ("f32": f32 activations and KV cache).
  RuntimeOptions ro{.reference = !job.value("fast", false)};
  if (job.value("f32", false)) ro.activations = ActPath::kF32, ro.kv_cache = KvType::kF32;
  auto tr = Transformer::load(*src, ro);
  ASSERT_TRUE(tr.ok()) << tr.error().message;
  const Transformer& t = **tr;
  nlohmann::json res = {{"vocab", t.config().vocab_size}, {"load_s", seconds_since(t0)}};
  const int64_t V = t.config().vocab_size;

  std::ofstream logits_out(std::string(out) + "/logits.f32", std::ios::binary);
  std::vector<int64_t> rows;
  std::vector<double> prefill_s;
  for (const auto& w : job.value("windows", nlohmann::json::array())) {
    std::vector<int32_t> ids = w.get<std::vector<int32_t>>();
    KvCache cache = t.new_cache(static_cast<int64_t>(ids.size()));
    std::vector<float> logits(ids.size() * V);
    auto t1 = std::chrono::steady_clock::now();
    Status st = t.forward(ids, cache, logits);
    prefill_s.push_back(seconds_since(t1));
    ASSERT_TRUE(st.ok()) << st.error().message;
    logits_out.write(reinterpret_cast<const char*>(logits.data()),
                     static_cast<std::streamsize>(logits.size() * sizeof(float)));
    rows.push_back(static_cast<int64_t>(ids.size()));
  }
  logits_out.close();
  res["rows"] = rows;
  res["prefill_s"] = prefill_s;

  std::ofstream decode_out(std::string(out) + "/decode.f32", std::ios::binary);
  std::vector<int64_t> decode_rows;
  for (const auto& w : job.value("decode_windows", nlohmann::json::array())) {
    std::vector<int32_t> ids = w.get<std::vector<int32_t>>();
    const size_t split = std::min<size_t>(job.value("split", 1), ids.size());
    ASSERT_GE(split, 1u);
    KvCache cache = t.new_cache(static_cast<int64_t>(ids.size()));
    std::vector<float> logits(ids.size() * V);
    Status st = t.forward(std::span(ids).first(split), cache, logits);
    ASSERT_TRUE(st.ok()) << st.error().message;
    for (size_t i = split; i < ids.size() && st.ok(); ++i)
      st = t.forward(std::span(ids).subspan(i, 1), cache, std::span(logits).subspan(i * V, V));
    ASSERT_TRUE(st.ok()) << st.error().message;
    decode_out.write(reinterpret_cast<const char*>(logits.data()),
                     static_cast<std::streamsize>(logits.size() * sizeof(float)));
    decode_rows.push_back(static_cast<int64_t>(ids.size()));
  }
  decode_out.close();
  res["decode_rows"] = decode_rows;

  if (job.contains("prompt")) {
    std::vector<int32_t> prompt = job["prompt"].get<std::vector<int32_t>>();
    const int64_t max_tokens = job.value("max_tokens", 64);
    KvCache cache = t.new_cache(static_cast<int64_t>(prompt.size()) + max_tokens);
    std::vector<float> last(V);
    Status st = t.forward(prompt, cache, last, /*all_logits=*/false);
    ASSERT_TRUE(st.ok()) << st.error().message;
    std::vector<int32_t> gen = {argmax(last)};
    auto t2 = std::chrono::steady_clock::now();
    while (static_cast<int64_t>(gen.size()) < max_tokens) {
      st = t.forward(std::span(gen).last(1), cache, last, false);
      ASSERT_TRUE(st.ok()) << st.error().message;
      gen.push_back(argmax(last));
    }
    res["generated"] = gen;
    res["decode_s"] = seconds_since(t2) / std::max<double>(1.0, double(gen.size() - 1));
  }
  testing::write_file(std::string(out) + "/result.json", res.dump());
}

}  // namespace
}  // namespace tq
