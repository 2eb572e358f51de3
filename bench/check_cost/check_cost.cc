// What a speculative check costs: one forward of m positions with SeqStep::per_token (the rows
// a check runs) after `context` positions, against a one-token decode step, min over repeats.
// Usage: tq_check_cost MODEL [context=200] [m,m,...=1,2,3,5,9] [repeats=30]
// Runtime flags come from the environment as for every verb (TQ_PREPACK, TQ_AMX, ...).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "model/forward.h"
#include "model/model_source.h"

int main(int argc, char** argv) {
  using namespace tq;
  if (argc < 2) {
    std::fprintf(stderr, "usage: tq_check_cost MODEL [context] [m,m,...] [repeats]\n");
    return 2;
  }
  auto src = open_model(argv[1]);
  if (!src.ok()) return std::fprintf(stderr, "%s\n", src.error().message.c_str()), 1;
  RuntimeOptions o;
  if (const char* p = std::getenv("TQ_PREPACK"))
    o.prepack = std::string(p) == "1"   ? Prepack::kOn
                : std::string(p) == "0" ? Prepack::kOff
                                        : Prepack::kAuto;
  auto model = Transformer::load(*src, o);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.error().message.c_str()), 1;
  const Transformer& t = **model;
  const int64_t ctx = argc > 2 ? std::atoi(argv[2]) : 200, vocab = t.config().vocab_size;
  std::vector<int> ms = {1, 2, 3, 5, 9};
  if (argc > 3) {
    ms.clear();
    std::stringstream ss(argv[3]);
    for (std::string m; std::getline(ss, m, ',');) ms.push_back(std::atoi(m.c_str()));
  }
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 30;
  const int top = *std::max_element(ms.begin(), ms.end());
  if (ctx < 1 || top < 1 || top > 64 || repeats < 1)
    return std::fprintf(stderr, "context >= 1, m in [1, 64], repeats >= 1\n"), 2;
  KvCache cache = t.new_cache(ctx + top);
  std::vector<int32_t> prompt(static_cast<size_t>(ctx));
  for (int64_t i = 0; i < ctx; ++i) prompt[i] = static_cast<int32_t>(100 + (i * 37) % 5000);
  std::vector<float> logits(static_cast<size_t>(top * vocab));
  if (Status st = t.forward(prompt, cache, logits, false); !st.ok())
    return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
  std::printf("%s, %s, context %lld\n", argv[1], t.runtime_name().c_str(),
              static_cast<long long>(ctx));
  double one = 0;
  for (int m : ms) {
    std::vector<int32_t> rows(static_cast<size_t>(m), 1234);
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      cache.n = ctx;
      const SeqStep step{rows, &cache,
                         std::span<float>(logits).first(static_cast<size_t>(m) * vocab), m > 1,
                         /*per_token=*/true};
      const auto t0 = std::chrono::steady_clock::now();
      if (Status st = t.forward_batch(std::span(&step, 1)); !st.ok())
        return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (m == 1) one = best;
    if (one > 0)
      std::printf("m=%d  %.2f ms  %.2f decode steps\n", m, best * 1e3, best / one);
    else
      std::printf("m=%d  %.2f ms\n", m, best * 1e3);
  }
  return 0;
}
