// What a server step costs when it carries prompt tokens beside decode rows: D decode rows at
// `context` positions each, with and without n prompt tokens at position P (SeqStep::prefill,
// batch_invariant as `tq serve` runs), min over repeats, in ms and in decode-only steps.
// Usage: tq_step_cost MODEL [decode_rows=2] [context=1000] [P,P,...=500,2000,4000] [n,n,...=1,2,4]
//        [repeats=20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "model/forward.h"
#include "model/model_source.h"

namespace {

std::vector<int> list(const char* s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(std::atoi(x.c_str()));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tq;
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: tq_step_cost MODEL [decode_rows] [context] [P,...] [n,...] "
                 "[repeats]\n");
    return 2;
  }
  auto src = open_model(argv[1]);
  if (!src.ok()) return std::fprintf(stderr, "%s\n", src.error().message.c_str()), 1;
  RuntimeOptions o;
  o.batch_invariant = true;
  // TQ_PREPACK=on|off as the verbs read it (default auto).
  if (const char* e = std::getenv("TQ_PREPACK"))
    o.prepack = std::string(e) == "on"    ? Prepack::kOn
                : std::string(e) == "off" ? Prepack::kOff
                                          : Prepack::kAuto;
  auto model = Transformer::load(*src, o);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.error().message.c_str()), 1;
  const Transformer& t = **model;
  const int d = argc > 2 ? std::atoi(argv[2]) : 2;
  const int64_t ctx = argc > 3 ? std::atoi(argv[3]) : 1000, vocab = t.config().vocab_size;
  const std::vector<int> ps = list(argc > 4 ? argv[4] : "500,2000,4000");
  const std::vector<int> ns = list(argc > 5 ? argv[5] : "1,2,4");
  const int repeats = argc > 6 ? std::atoi(argv[6]) : 20;
  const int pmax = *std::max_element(ps.begin(), ps.end()),
            nmax = *std::max_element(ns.begin(), ns.end());
  if (d < 0 || ctx < 1 || pmax < 1 || nmax < 1 || repeats < 1)
    return std::fprintf(stderr, "bad arguments\n"), 2;
  auto fill = [&](KvCache& c, int64_t len) -> bool {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) p[i] = static_cast<int32_t>(100 + (i * 37) % 5000);
    std::vector<float> lg(static_cast<size_t>(vocab));
    return t.forward(p, c, lg, false).ok();
  };
  std::vector<KvCache> caches;
  for (int i = 0; i < d; ++i) {
    caches.push_back(t.new_cache(ctx + 1));
    if (!fill(caches.back(), ctx)) return std::fprintf(stderr, "prefill failed\n"), 1;
  }
  KvCache prompt = t.new_cache(pmax + nmax);
  if (!fill(prompt, pmax)) return std::fprintf(stderr, "prefill failed\n"), 1;
  std::vector<float> logits(static_cast<size_t>((d + 1) * vocab));
  std::vector<int32_t> one(1, 1234), toks(static_cast<size_t>(nmax), 1234);
  auto time_step = [&](int p, int n) {
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      std::vector<SeqStep> steps;
      for (int i = 0; i < d; ++i) {
        caches[i].n = ctx;
        steps.push_back({one, &caches[i],
                         std::span<float>(logits).subspan(static_cast<size_t>(i) * vocab, vocab)});
      }
      if (n > 0) {
        prompt.n = p;
        steps.push_back(
            {.tokens = std::span<const int32_t>(toks).first(n),
             .cache = &prompt,
             .logits = std::span<float>(logits).subspan(static_cast<size_t>(d) * vocab, vocab),
             .prefill = true});
      }
      const auto t0 = std::chrono::steady_clock::now();
      if (!t.forward_batch(steps).ok()) return -1.0;
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double base = time_step(0, 0);
  std::printf("%s, %s, %d decode rows at %lld positions: %.2f ms a step\n", argv[1],
              t.runtime_name().c_str(), d, static_cast<long long>(ctx), base * 1e3);
  for (int p : ps)
    for (int n : ns) {
      const double s = time_step(p, n);
      std::printf("prompt tokens %d at %d: %.2f ms  %.2f steps  (+%.2f ms)\n", n, p, s * 1e3,
                  s / base, (s - base) * 1e3);
    }
  return 0;
}
