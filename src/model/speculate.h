// Speculative decoding: proposed next tokens checked in one forward of the target over all of
// them (SeqStep::per_token), so each accepted proposal costs a fraction of a decode step. A row
// of the check has the bits plain decoding gives, and every token is still drawn from the
// target's row by the request's own sampler (take_checked): the output is the plain decode's,
// token for token, greedy or seeded. Proposals come from a Proposer: prompt lookup (n-grams of
// the text so far) or a draft model with the same vocabulary.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "model/forward.h"
#include "model/generation.h"
#include "text/tokenizer.h"

namespace tq {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // At most k tokens that may follow `history` (the prompt and every token taken so far).
  virtual Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int k) = 0;
  virtual std::string name() const = 0;  // "lookup", "draft"
  // Seconds the last propose() spent reading the prompt (a draft's first forward): a one-off,
  // left out of what a check costs.
  virtual double catch_up_seconds() const { return 0; }
  // Proposals cost nothing to make: the speculator asks for the most it may check, then sizes
  // the check by the acceptance of proposals found the same way (evidence(), below kEvidence).
  virtual bool free_to_propose() const { return false; }
  virtual int evidence() const { return 0; }
  static constexpr int kEvidence = 8;
};

// Prompt lookup: the longest suffix of the history (max_ngram down to min_ngram tokens) that
// occurred before, latest occurrence first; proposes what followed it. Free to compute; its
// evidence is the matched length (a one-token match is taken far less often than a 4-gram).
class LookupProposer final : public Proposer {
 public:
  explicit LookupProposer(int min_ngram = 1, int max_ngram = 4)
      : min_(min_ngram), max_(std::min(max_ngram, kEvidence - 1)) {}
  Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int k) override;
  std::string name() const override { return "lookup"; }
  bool free_to_propose() const override { return true; }
  int evidence() const override { return matched_; }

 private:
  int min_, max_;
  int matched_ = 0;  // n-gram length behind the last proposals
};

// A smaller model's greedy continuation. It keeps its own cache of the history it has read and
// goes back to the longest prefix it shares with the next history (attention-only models).
class DraftProposer final : public Proposer {
 public:
  // Errors unless `draft` can roll back its cache and has `target`'s vocabulary (checked once
  // per draft, before proposers are made).
  static Status check(const Transformer& draft, const Tokenizer& draft_tok,
                      const Transformer& target, const Tokenizer& target_tok);
  // A sequence's proposer, its cache for `capacity` positions, from a draft check() accepted.
  static std::unique_ptr<DraftProposer> make(std::shared_ptr<const Transformer> draft,
                                             int64_t capacity);
  Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int k) override;
  std::string name() const override { return "draft"; }
  double catch_up_seconds() const override { return catch_up_s_; }

 private:
  DraftProposer(std::shared_ptr<const Transformer> m, int64_t capacity);
  double catch_up_s_ = 0;
  std::shared_ptr<const Transformer> model_;
  KvCache cache_;
  std::vector<int32_t> fed_;  // tokens in cache_, in order
  std::vector<float> logits_;
};

// Errors unless speculation can run on `model`: the fast runtime (its per_token rows) and a
// cache that can go back to an earlier position (no recurrent-state layers).
Status check_speculation(const Transformer& model);

struct SpecStats {
  int64_t steps = 0;     // target forwards after the prompt
  int64_t checks = 0;    // of them, those that checked proposals
  int64_t proposed = 0;  // tokens proposed and checked
  int64_t accepted = 0;  // of them, those the target agreed with
  int64_t tokens = 0;    // tokens the steps produced
  double tokens_per_step() const { return steps ? static_cast<double>(tokens) / steps : 0; }
  double acceptance() const { return proposed ? static_cast<double>(accepted) / proposed : 0; }
};

// Measured seconds of a step over m positions (decayed means), shared by the sequences of one
// model so that only the first pays for learning them. Unmeasured sizes are extrapolated from
// the largest measured one (or, before any, guessed at 30% of a step per position).
class StepCosts {
 public:
  static constexpr int kMax = 18;
  void record(int m, double seconds);
  // Cost of a step over m positions relative to a plain step.
  double relative(int m) const;
  double seconds(int m) const { return m > 0 && m < kMax ? t_[m] : 0; }

 private:
  std::array<double, kMax> t_{};
};

// Decides how many proposals each step checks: k maximising expected tokens per unit of time,
// from the running acceptance rate and measured forward times of 1..max_k+1 positions; none
// when no k pays (then a cheap one-proposal probe now and then, to notice when it starts to).
class Speculator {
 public:
  static constexpr int kMaxK = 16;
  // fixed: every step with proposals checks max_k of them (no adaptation: A/B runs, tests).
  Speculator(std::unique_ptr<Proposer> p, int max_k,
             std::shared_ptr<StepCosts> costs = std::make_shared<StepCosts>(), bool fixed = false);
  // Proposals for the step after `history` (empty: a plain decode step), at most `room`.
  Result<std::vector<int32_t>> next(std::span<const int32_t> history, int64_t room);
  // The step's forward over `positions` tokens took `seconds`; `proposed` of them were
  // proposals, `accepted` agreed with the target, `produced` tokens were taken.
  void record(int proposed, int accepted, int produced, double seconds);
  const SpecStats& stats() const { return stats_; }
  const Proposer& proposer() const { return *p_; }
  int max_k() const { return max_k_; }
  const StepCosts& costs() const { return *costs_; }

 private:
  int choose_k() const;          // at the running acceptance rate of evidence_
  int choose_k(double a) const;  // at acceptance a
  std::unique_ptr<Proposer> p_;
  int max_k_;
  bool fixed_;
  int idle_ = 0;  // plain steps in a row since a check
  int probe_every_ = 16;
  bool probe_ = false;
  int64_t steps_ = 0;  // next() calls
  // Decayed counts of accepted / first-rejected proposals, per evidence of the proposer.
  std::array<double, Proposer::kEvidence> hit_{}, miss_{};
  int evidence_ = 0;  // of the proposals last handed out
  std::shared_ptr<StepCosts> costs_;
  SpecStats stats_;
};

// A fresh Speculator for a sequence that may reach `capacity` positions (a draft's cache is per
// sequence, its weights shared); what the --lookup / --draft flags make.
using SpeculatorFactory = std::function<Result<std::unique_ptr<Speculator>>(int64_t capacity)>;

// What --lookup / --draft MODEL / --spec-k ask for.
struct SpecOptions {
  bool lookup = false;
  std::string draft;   // a model path
  int k = 8;           // most proposals per step
  bool fixed = false;  // --spec-fixed: always k, no adaptation
  bool any() const { return lookup || !draft.empty(); }
};
// The factory `o` asks for (null when it asks for nothing): checks the flags, the target, and a
// draft's vocabulary once; loads the draft's weights once (with `runtime`).
Result<SpeculatorFactory> make_speculator_factory(const SpecOptions& o, const Transformer& target,
                                                  const Tokenizer& target_tok,
                                                  const RuntimeOptions& runtime);

// What a check step gave: tokens taken (1 + accepted), whether the generation ended.
struct Checked {
  int accepted = 0;
  int taken = 0;
  std::string text;  // Generation::accept's pieces, in order
};
// Takes the rows of a check in order: row i's token through gen (its sampler, its adjustments)
// and onto `history`; stops after the first token that differs from proposals[i] (or the last
// row, or the end of the generation). rows: [proposals.size() + 1, vocab].
Checked take_checked(Generation& gen, std::span<float> rows, int64_t vocab,
                     std::span<const int32_t> proposals, std::vector<int32_t>* history);

// The decode loop after a prefill whose last row of logits is logits[0, vocab): samples and
// takes tokens through gen until it finishes, feeding each one (with `spec`, plus its proposals,
// SeqStep::per_token) to the model; emit(text) after every step. `history` holds the prompt
// and gets every token taken; logits has room for spec's max_k + 1 rows; the cache for
// everything plus max_k.
Status decode_loop(const Transformer& model, KvCache& cache, Generation& gen,
                   std::vector<int32_t>* history, std::span<float> logits, Speculator* spec,
                   const std::function<void(std::string_view)>& emit);

}  // namespace tq
