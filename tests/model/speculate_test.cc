#include "model/speculate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../testing/tiny_models.h"
#include "model/model_source.h"

namespace tq {
namespace {

std::vector<int32_t> propose(LookupProposer& p, const std::vector<int32_t>& h, int k) {
  auto r = p.propose(h, k);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : std::vector<int32_t>();
}

TEST(LookupProposer, ProposesWhatFollowedTheLatestLongestMatch) {
  LookupProposer p(2, 4);
  // "1 2 3 4 5 ... 1 2 3" -> "4 5" follows the earlier 1 2 3.
  EXPECT_EQ(propose(p, {1, 2, 3, 4, 5, 9, 1, 2, 3}, 2), (std::vector<int32_t>{4, 5}));
  // Capped by k and by the end of the history.
  EXPECT_EQ(propose(p, {1, 2, 3, 4, 5, 9, 1, 2, 3}, 8), (std::vector<int32_t>{4, 5, 9, 1, 2, 3}));
  // The latest occurrence wins: "7 8" was followed by 1 then by 2.
  EXPECT_EQ(propose(p, {7, 8, 1, 7, 8, 2, 7, 8}, 1), (std::vector<int32_t>{2}));
  // A longer match beats a later shorter one: "5 7 8" occurred once, followed by 3.
  EXPECT_EQ(propose(p, {5, 7, 8, 3, 7, 8, 4, 5, 7, 8}, 1), (std::vector<int32_t>{3}));
  // No n-gram of min length repeated: nothing; a single repeated token is below min_ngram.
  EXPECT_TRUE(propose(p, {1, 2, 3, 4, 1}, 4).empty());
  EXPECT_TRUE(propose(p, {}, 4).empty());
  EXPECT_TRUE(propose(p, {1, 2, 1, 2}, 0).empty());
  // A run repeats itself.
  EXPECT_EQ(propose(p, {6, 6, 6, 6}, 3), (std::vector<int32_t>{6}));
  EXPECT_EQ(p.evidence(), 3);
  // The default takes one-token matches too, and says so.
  LookupProposer one;
  EXPECT_EQ(propose(one, {1, 2, 3, 4, 1}, 2), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(one.evidence(), 1);
  EXPECT_EQ(propose(one, {5, 7, 8, 3, 7, 8, 4, 5, 7, 8}, 1), (std::vector<int32_t>{3}));
  EXPECT_EQ(one.evidence(), 3);
  EXPECT_TRUE(propose(one, {1, 2, 3}, 2).empty());
  EXPECT_EQ(one.evidence(), 0);
}

// A free proposer whose proposals alternate between two kinds of evidence: those of evidence 4
// are always right, those of evidence 1 never.
class TwoKinds final : public Proposer {
 public:
  Result<std::vector<int32_t>> propose(std::span<const int32_t>, int k) override {
    good_ = !good_;
    return std::vector<int32_t>(static_cast<size_t>(k), 1);
  }
  std::string name() const override { return "two kinds"; }
  bool free_to_propose() const override { return true; }
  int evidence() const override { return good_ ? 4 : 1; }
  bool good_ = false;
};

// Checks are sized per evidence: the right kind's grow, the wrong kind's stop (but for probes).
TEST(Speculator, SizesChecksByTheEvidenceBehindTheProposals) {
  auto proposer = std::make_unique<TwoKinds>();
  const TwoKinds* kinds = proposer.get();
  Speculator s(std::move(proposer), 8);
  const std::vector<int32_t> h = {1, 2, 3};
  int64_t good = 0, bad = 0;
  for (int i = 0; i < 400; ++i) {
    auto p = s.next(h, 100);
    ASSERT_TRUE(p.ok());
    const int k = static_cast<int>(p->size());
    const int acc = kinds->good_ ? k : 0;
    s.record(k, acc, acc + 1, 1.0 + 0.05 * k);
    if (i >= 200) (kinds->good_ ? good : bad) += k;
  }
  EXPECT_GE(good, 100 * 6);  // most of the last 100 good steps check 6+ proposals
  EXPECT_LE(bad, 10);        // the bad ones: a probe now and then
}

// A proposer that always offers the same tokens, to drive the Speculator.
class Fixed final : public Proposer {
 public:
  Result<std::vector<int32_t>> propose(std::span<const int32_t>, int k) override {
    return std::vector<int32_t>(static_cast<size_t>(k), 1);
  }
  std::string name() const override { return "fixed"; }
};

int run_steps(Speculator& s, int steps, double accept_rate, double base, double per_pos) {
  int last = 0;
  const std::vector<int32_t> h = {1, 2, 3};
  for (int i = 0; i < steps; ++i) {
    auto p = s.next(h, 100);
    EXPECT_TRUE(p.ok());
    const int k = static_cast<int>(p->size());
    // Proposals accepted in a row while the running fraction stays under the rate.
    int acc = 0;
    while (acc < k && (i * 7 + acc * 3) % 100 < accept_rate * 100) ++acc;
    s.record(k, acc, acc + 1, base + per_pos * k);
    last = k;
  }
  return last;
}

TEST(Speculator, ChecksManyWhenTheyAreAcceptedAndCheap) {
  Speculator s(std::make_unique<Fixed>(), 8);
  EXPECT_GE(run_steps(s, 200, 0.95, 1.0, 0.02), 4);
  EXPECT_GT(s.stats().tokens_per_step(), 2.0);
}

TEST(Speculator, StopsCheckingWhenNothingIsAcceptedAndProbesNowAndThen) {
  Speculator s(std::make_unique<Fixed>(), 8);
  run_steps(s, 100, 0.0, 1.0, 0.05);
  const SpecStats before = s.stats();
  run_steps(s, 64, 0.0, 1.0, 0.05);
  const int64_t checks = s.stats().checks - before.checks;
  EXPECT_GE(checks, 1);  // the probes, further apart while they fail
  EXPECT_LE(checks, 4);
  EXPECT_EQ(s.stats().proposed - before.proposed, checks);  // one proposal each
  const int64_t more = s.stats().checks;
  run_steps(s, 512, 0.0, 1.0, 0.05);
  EXPECT_LE(s.stats().checks - more, 4);
}

// Every proposal accepted, but each checked position costs a whole step (a draft as slow as its
// target): checks never pay, so once that is measured probes come only every 256 steps, even
// though each probe's proposal is taken.
TEST(Speculator, ProbesRarelyWhereChecksCannotPayEvenWhenAllAreTaken) {
  Speculator s(std::make_unique<Fixed>(), 8);
  run_steps(s, 64, 1.0, 1.0, 1.0);
  const int64_t checks = s.stats().checks;
  run_steps(s, 512, 1.0, 1.0, 1.0);
  EXPECT_LE(s.stats().checks - checks, 2);
  EXPECT_EQ(s.stats().accepted, s.stats().proposed);
}

// A proposer that reports `catch_up` seconds of reading the prompt with each proposal.
class CatchingUp final : public Proposer {
 public:
  explicit CatchingUp(double catch_up) : catch_up_(catch_up) {}
  Result<std::vector<int32_t>> propose(std::span<const int32_t>, int k) override {
    return std::vector<int32_t>(static_cast<size_t>(k), 1);
  }
  std::string name() const override { return "catching up"; }
  double catch_up_seconds() const override { return catch_up_; }

 private:
  double catch_up_;
};

// The prompt's catch-up is not what a check costs: cheap checks whose steps also carry one are
// still taken for cheap.
TEST(Speculator, LeavesACatchUpOutOfWhatAChecksCosts) {
  auto costs = std::make_shared<StepCosts>();
  Speculator s(std::make_unique<CatchingUp>(5.0), 4, costs);
  const std::vector<int32_t> h = {1, 2, 3};
  for (int i = 0; i < 40; ++i) {
    auto p = s.next(h, 100);
    ASSERT_TRUE(p.ok());
    const int k = static_cast<int>(p->size());
    s.record(k, k, k + 1, 1.0 + 0.1 * k + (k > 0 ? 5.0 : 0.0));
  }
  EXPECT_NEAR(costs->relative(2), 1.1, 1e-6);
  EXPECT_GT(s.stats().tokens_per_step(), 3.0);
}

TEST(Speculator, FixedChecksKAtEveryStep) {
  Speculator s(std::make_unique<Fixed>(), 3, std::make_shared<StepCosts>(), /*fixed=*/true);
  run_steps(s, 50, 0.0, 1.0, 5.0);  // nothing taken, each check costly: still 3 every step
  EXPECT_EQ(s.stats().checks, 50);
  EXPECT_EQ(s.stats().proposed, 150);
}

TEST(Speculator, NeverProposesPastTheRoomLeft) {
  Speculator s(std::make_unique<Fixed>(), 8);
  const std::vector<int32_t> h = {1};
  auto p = s.next(h, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_LE(p->size(), 2u);
  p = s.next(h, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->empty());
}

// A BPE tokenizer of `n` one-character tokens (the tiny models' vocabulary).
Tokenizer tiny_tokenizer(int64_t n) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int64_t i = 0; i < n; ++i) vocab[std::string(1, static_cast<char>('0' + i))] = i;
  const nlohmann::json j = {{"version", "1.0"},
                            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {}}}}};
  auto t = Tokenizer::from_json(j.dump(), "tiny.json");
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return std::move(t).value();
}

struct Decoded {
  std::vector<int32_t> tokens;
  SpecStats stats;
};

// A prompt with repeated n-grams (prompt lookup finds them), then `max` tokens.
Decoded generate(const Transformer& m, const Tokenizer& tok, std::unique_ptr<Proposer> p,
                 SamplingOptions so, int64_t max) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 7) % 10 + (i / 20) * 3);
  const int k = 4;
  const int64_t V = m.config().vocab_size;
  KvCache cache = m.new_cache(static_cast<int64_t>(prompt.size()) + max + k);
  std::vector<float> logits(static_cast<size_t>((k + 1) * V));
  EXPECT_TRUE(m.forward(prompt, cache, std::span(logits).first(V), false).ok());
  Generation gen(tok, {.sampling = so, .max_tokens = max});
  std::unique_ptr<Speculator> spec;
  if (p) spec = std::make_unique<Speculator>(std::move(p), k);
  std::vector<int32_t> history = prompt;
  EXPECT_TRUE(
      decode_loop(m, cache, gen, &history, logits, spec.get(), [](std::string_view) {}).ok());
  EXPECT_EQ(history.size(), prompt.size() + gen.tokens().size());
  return {gen.tokens(), spec ? spec->stats() : SpecStats{}};
}

// Speculation changes how many forwards run, never the tokens: greedy, and seeded sampling
// draw for draw (each token is drawn from the target's row by the request's own sampler), so
// the sampled distribution is the target's (a χ² test of homogeneity on one position).
TEST(Speculation, GivesThePlainDecodesTokensGreedyAndSampled) {
  testing::TempDir dir;
  auto src = open_model(testing::write_tiny_q4_model(dir, "llama"));
  ASSERT_TRUE(src.ok()) << src.error().message;
  auto loaded = Transformer::load(*src, RuntimeOptions{.threads = 2});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  std::shared_ptr<const Transformer> m = std::move(*loaded);
  ASSERT_TRUE(check_speculation(*m).ok());
  const Tokenizer tok = tiny_tokenizer(m->config().vocab_size);
  ASSERT_TRUE(DraftProposer::check(*m, tok, *m, tok).ok());
  auto draft = [&] { return DraftProposer::make(m, 128); };

  const Decoded plain = generate(*m, tok, nullptr, {}, 24);
  const Decoded lookup = generate(*m, tok, std::make_unique<LookupProposer>(), {}, 24);
  const Decoded drafted = generate(*m, tok, draft(), {}, 24);
  EXPECT_EQ(plain.tokens, lookup.tokens);
  EXPECT_EQ(plain.tokens, drafted.tokens);
  // The target drafting itself: every proposal is taken (though checks stop paying: the draft
  // costs what the target does).
  EXPECT_GT(drafted.stats.proposed, 0);
  EXPECT_EQ(drafted.stats.accepted, drafted.stats.proposed);

  const int draws = 2000, at = 5;
  std::map<int32_t, std::pair<int, int>> counts;  // token at `at`: plain, speculative
  int64_t accepted = 0;
  for (int seed = 0; seed < draws; ++seed) {
    const SamplingOptions so{.temperature = 1.0, .seed = static_cast<uint64_t>(seed)};
    const Decoded a = generate(*m, tok, nullptr, so, at + 1);
    const Decoded b = seed % 2 ? generate(*m, tok, std::make_unique<LookupProposer>(), so, at + 1)
                               : generate(*m, tok, draft(), so, at + 1);
    ASSERT_EQ(a.tokens, b.tokens) << "seed " << seed;
    accepted += b.stats.accepted;
    ++counts[a.tokens.back()].first;
    ++counts[b.tokens.back()].second;
  }
  EXPECT_GT(accepted, draws / 10);  // the checks took proposals, not just plain steps
  double chi2 = 0;
  for (const auto& [tok_id, c] : counts) {
    const double e = (c.first + c.second) / 2.0;
    chi2 += (c.first - e) * (c.first - e) / e + (c.second - e) * (c.second - e) / e;
  }
  // χ² critical value at p = 0.01 (Wilson-Hilferty, z = 2.326).
  const double df = std::max<double>(1, counts.size() - 1);
  const double crit = df * std::pow(1 - 2 / (9 * df) + 2.326 * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi2, crit);
}

TEST(Speculation, RefusesADraftWithAnotherVocabulary) {
  testing::TempDir a, b;
  nlohmann::json j = testing::tiny_json("llama");
  auto sa = open_model(testing::write_tiny_model(a, j));
  j["vocab_size"] = 60;
  auto sb = open_model(testing::write_tiny_model(b, j));
  ASSERT_TRUE(sa.ok() && sb.ok());
  auto ta = Transformer::load(*sa, RuntimeOptions{.threads = 1});
  auto tb = Transformer::load(*sb, RuntimeOptions{.threads = 1});
  ASSERT_TRUE(ta.ok() && tb.ok());
  const Tokenizer t70 = tiny_tokenizer(70), t60 = tiny_tokenizer(60);
  const Status d = DraftProposer::check(**tb, t60, **ta, t70);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("vocabulary"), std::string::npos) << d.error().message;
  // The reference runtime cannot check per token.
  auto r = Transformer::load(*sa, RuntimeOptions{.reference = true});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(check_speculation(**r).ok());
}

}  // namespace
}  // namespace tq
