#include "eval/spec_bench.h"

#include <chrono>

#include "eval/bench.h"
#include "model/generation.h"

namespace tq::eval {

const std::vector<std::string>& default_spec_prompts() {
  static const std::vector<std::string> p = {
      "Add a docstring to this function and return the whole code:\n\n"
      "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
      "    return total / len(values)\n\n"
      "def variance(values):\n    m = mean(values)\n    total = 0\n    for v in values:\n"
      "        total += (v - m) ** 2\n    return total / len(values)\n",
      "List every name, date and number in this note, one per line: Maria Chen called on "
      "June 4 about invoice 7731; Tom Ruiz will visit on June 9 with 12 samples and the "
      "contract for order 5520.",
      "Rewrite this paragraph in the past tense: The train leaves the station at dawn. "
      "Passengers watch the fields turn gold while the conductor checks every ticket and the "
      "children count the cows they pass.",
      "Write a short story about a fox who learns to swim.",
      "Explain why the sky is blue to a ten-year-old.",
      "What are some good ways to save money on groceries?",
  };
  return p;
}

namespace {

using Clock = std::chrono::steady_clock;

struct Run {
  std::vector<int32_t> tokens;
  double tok_s = 0;
  SpecStats stats;
};

Result<Run> decode(const Transformer& t, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                   int64_t gen, const std::vector<int32_t>& eos, Speculator* spec) {
  const int64_t vocab = t.config().vocab_size, k = spec ? spec->max_k() : 0;
  KvCache cache = t.new_cache(static_cast<int64_t>(prompt.size()) + gen + k);
  std::vector<float> logits(static_cast<size_t>((k + 1) * vocab));
  TQ_CHECK_OK(t.forward(prompt, cache, std::span(logits).first(vocab), false));
  Generation g(tok, {.eos = eos, .max_tokens = gen});
  std::vector<int32_t> history = prompt;
  const auto t0 = Clock::now();
  TQ_CHECK_OK(decode_loop(t, cache, g, &history, logits, spec, [](std::string_view) {}));
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  Run r;
  r.tokens = g.tokens();
  // The first token came from the prompt's forward: the loop made the rest, and the end token
  // when one came.
  const auto made = static_cast<int64_t>(r.tokens.size()) - 1 + (g.eos_seen() ? 1 : 0);
  r.tok_s = s > 0 && made > 0 ? static_cast<double>(made) / s : 0;
  if (spec) r.stats = spec->stats();
  return r;
}

}  // namespace

Result<SpecBenchResult> run_spec_bench(const Transformer& t, const Tokenizer& tok,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       const std::vector<std::string>& labels, int64_t gen,
                                       const std::vector<int32_t>& eos, int repeat,
                                       const SpeculatorFactory& make_spec,
                                       const std::function<void(int64_t, int64_t)>& progress) {
  if (gen < 2) return err("bench: --gen must be >= 2 with speculation, got {}", gen);
  SpecBenchResult r;
  std::vector<double> plain_all, spec_all;
  int64_t done = 0;
  const int64_t total = static_cast<int64_t>(prompts.size()) * repeat;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SpecBenchPrompt p;
    p.label = labels[i];
    std::vector<double> plain, fast;
    for (int rep = 0; rep < repeat; ++rep) {
      TQ_TRY(Run a, decode(t, tok, prompts[i], gen, eos, nullptr));
      TQ_TRY(std::unique_ptr<Speculator> spec,
             make_spec(static_cast<int64_t>(prompts[i].size()) + gen + Speculator::kMaxK));
      if (r.proposer.empty()) r.proposer = spec->proposer().name();
      TQ_TRY(Run b, decode(t, tok, prompts[i], gen, eos, spec.get()));
      if (a.tokens != b.tokens)
        return err("bench: speculation changed the tokens of prompt '{}' (a bug: please report)",
                   p.label);
      plain.push_back(a.tok_s), fast.push_back(b.tok_s);
      p.tokens = static_cast<int64_t>(a.tokens.size());
      p.stats.steps += b.stats.steps, p.stats.checks += b.stats.checks;
      p.stats.proposed += b.stats.proposed, p.stats.accepted += b.stats.accepted;
      p.stats.tokens += b.stats.tokens;
      if (progress) progress(++done, total);
    }
    p.plain_tok_s = spread(plain).median, p.spec_tok_s = spread(fast).median;
    plain_all.push_back(p.plain_tok_s), spec_all.push_back(p.spec_tok_s);
    r.prompts.push_back(p);
  }
  r.plain_tok_s = spread(plain_all).median, r.spec_tok_s = spread(spec_all).median;
  return r;
}

nlohmann::json spec_bench_json(const SpecBenchResult& r) {
  nlohmann::json ps = nlohmann::json::array();
  for (const SpecBenchPrompt& p : r.prompts)
    ps.push_back({{"prompt", p.label},
                  {"plain_decode_tok_s", p.plain_tok_s},
                  {"spec_decode_tok_s", p.spec_tok_s},
                  {"ratio", p.plain_tok_s > 0 ? p.spec_tok_s / p.plain_tok_s : 0},
                  {"tokens", p.tokens},
                  {"acceptance", p.stats.acceptance()},
                  {"tokens_per_forward", p.stats.tokens_per_step()}});
  return {{"proposer", r.proposer},
          {"plain_decode_tok_s", r.plain_tok_s},
          {"spec_decode_tok_s", r.spec_tok_s},
          {"ratio", r.plain_tok_s > 0 ? r.spec_tok_s / r.plain_tok_s : 0},
          {"prompts", ps}};
}

}  // namespace tq::eval
