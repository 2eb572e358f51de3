#include "model/speculate.h"

#include "model/model_source.h"
#include "model/model_tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

namespace tq {

Result<std::vector<int32_t>> LookupProposer::propose(std::span<const int32_t> history, int k) {
  std::vector<int32_t> out;
  const int64_t len = static_cast<int64_t>(history.size());
  if (k <= 0) return out;
  matched_ = 0;
  for (int64_t n = std::min<int64_t>(max_, len - 1); n >= min_; --n) {
    const auto suffix = history.subspan(static_cast<size_t>(len - n));
    // Latest earlier occurrence with at least one token after it.
    for (int64_t j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + j)) continue;
      const int64_t from = j + n, to = std::min<int64_t>(from + k, len);
      out.assign(history.begin() + from, history.begin() + to);
      matched_ = static_cast<int>(n);
      return out;
    }
  }
  return out;
}

Status check_speculation(const Transformer& model) {
  if (model.runtime_name().rfind("fast", 0) != 0)
    return err("speculative decoding runs on the fast runtime (drop --reference)");
  if (model.config().family == Family::kQwen35)
    return err(
        "speculative decoding needs a cache that can go back to an earlier position; "
        "qwen3_5's Gated DeltaNet states cannot yet");
  return ok_status();
}

Status DraftProposer::check(const Transformer& draft, const Tokenizer& draft_tok,
                            const Transformer& target, const Tokenizer& target_tok) {
  TQ_CHECK_OK(check_speculation(draft));
  const int64_t dv = draft.config().vocab_size, tv = target.config().vocab_size;
  const int64_t dt = draft_tok.vocab_size(), tt = target_tok.vocab_size();
  if (dv != tv || dt != tt)
    return err("the draft's vocabulary ({} tokens, {} embedding rows) is not the target's ({}, {})",
               dt, dv, tt, tv);
  for (int32_t id = 0; id < dt; ++id)
    if (draft_tok.id_to_token(id) != target_tok.id_to_token(id))
      return err("the draft's vocabulary differs from the target's at token {} ('{}' vs '{}')", id,
                 draft_tok.id_to_token(id), target_tok.id_to_token(id));
  return ok_status();
}

std::unique_ptr<DraftProposer> DraftProposer::make(std::shared_ptr<const Transformer> draft,
                                                   int64_t capacity) {
  return std::unique_ptr<DraftProposer>(new DraftProposer(std::move(draft), capacity));
}

DraftProposer::DraftProposer(std::shared_ptr<const Transformer> m, int64_t capacity)
    : model_(std::move(m)),
      cache_(model_->new_cache(capacity)),
      logits_(static_cast<size_t>(model_->config().vocab_size)) {}

Result<std::vector<int32_t>> DraftProposer::propose(std::span<const int32_t> history, int k) {
  std::vector<int32_t> out;
  const int64_t len = static_cast<int64_t>(history.size());
  if (k <= 0 || len == 0 || len + k > cache_.capacity) return out;
  // Keep what the cache shares with the history, less at least the last token (its logits).
  const auto diff = std::mismatch(fed_.begin(), fed_.end(), history.begin(), history.end());
  const int64_t keep = std::min<int64_t>(diff.first - fed_.begin(), len - 1);
  fed_.resize(static_cast<size_t>(keep));
  cache_.n = keep;
  const auto tail = history.subspan(static_cast<size_t>(keep));
  const auto t0 = std::chrono::steady_clock::now();
  TQ_CHECK_OK(model_->forward(tail, cache_, logits_, /*all_logits=*/false));
  // The first forward reads the whole prompt: a one-off, not what checks cost. (A catch-up after
  // plain steps is what each probe costs, so it stays in.)
  catch_up_s_ = keep == 0 && static_cast<int64_t>(tail.size()) > k + 1
                    ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                    : 0.0;
  fed_.insert(fed_.end(), tail.begin(), tail.end());
  for (int i = 0; i < k; ++i) {
    const int32_t t =
        static_cast<int32_t>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
    out.push_back(t);
    if (i + 1 == k) break;
    TQ_CHECK_OK(model_->forward(std::span(&t, 1), cache_, logits_, false));
    fed_.push_back(t);
  }
  return out;
}

void StepCosts::record(int m, double seconds) {
  if (m <= 0 || m >= kMax || seconds <= 0) return;
  t_[m] = t_[m] > 0 ? 0.8 * t_[m] + 0.2 * seconds : seconds;
}

double StepCosts::relative(int m) const {
  if (m <= 1) return 1.0;
  double slope = 0.3;  // per position beyond the first, in plain steps
  if (t_[1] > 0) {
    if (m < kMax && t_[m] > 0) return t_[m] / t_[1];
    for (int j = kMax - 1; j > 1; --j)
      if (t_[j] > 0) {
        slope = std::max(0.0, (t_[j] / t_[1] - 1.0) / (j - 1));
        break;
      }
  }
  return 1.0 + slope * (m - 1);
}

Speculator::Speculator(std::unique_ptr<Proposer> p, int max_k, std::shared_ptr<StepCosts> costs,
                       bool fixed)
    : p_(std::move(p)),
      max_k_(std::clamp(max_k, 1, kMaxK)),
      fixed_(fixed),
      costs_(std::move(costs)) {}

int Speculator::choose_k() const {
  // Acceptance per proposal, with a prior of one hit and one miss.
  const auto e = static_cast<size_t>(evidence_);
  return choose_k((hit_[e] + 1.0) / (hit_[e] + miss_[e] + 2.0));
}

int Speculator::choose_k(double a) const {
  auto cost = [&](int m) { return costs_->relative(m); };
  int best = 0;
  double best_rate = 1.0, expect = 1.0, ak = 1.0;
  for (int k = 1; k <= max_k_; ++k) {
    ak *= a;
    expect += ak;  // expected tokens of a check of k: 1 + a + ... + a^k
    const double rate = expect / cost(k + 1);
    if (rate > best_rate * 1.02) best = k, best_rate = rate;
  }
  return best;
}

Result<std::vector<int32_t>> Speculator::next(std::span<const int32_t> history, int64_t room) {
  ++steps_;
  if (fixed_) return p_->propose(history, static_cast<int>(std::min<int64_t>(max_k_, room)));
  // A plain step now and then measures what checks are compared with (a draft always has
  // proposals, so its plain steps would otherwise never be timed).
  const bool measure = costs_->seconds(1) == 0 || steps_ % 64 == 0;
  if (measure) return std::vector<int32_t>();
  std::vector<int32_t> found;
  if (p_->free_to_propose()) {
    // Found first, so the check's size follows how these were found.
    TQ_TRY(found, p_->propose(history, static_cast<int>(std::min<int64_t>(max_k_, room))));
    if (found.empty()) return found;
    evidence_ = std::clamp(p_->evidence(), 0, Proposer::kEvidence - 1);
  }
  int k = choose_k();
  // A probe: has acceptance come back? Rarely where the measured costs say checks would not pay
  // even if every proposal were taken (learned once for every sequence of the process).
  if (k == 0 && ++idle_ >= probe_every_ && (idle_ >= 256 || choose_k(1.0) > 0)) {
    k = 1;
    probe_ = true;
  }
  k = static_cast<int>(std::min<int64_t>(k, room));
  if (k <= 0) return std::vector<int32_t>();
  if (p_->free_to_propose()) {
    found.resize(std::min(found.size(), static_cast<size_t>(k)));
    return found;
  }
  return p_->propose(history, k);
}

void Speculator::record(int proposed, int accepted, int produced, double seconds) {
  costs_->record(proposed + 1, seconds - (proposed > 0 ? p_->catch_up_seconds() : 0.0));
  if (proposed > 0) {
    idle_ = 0;
    const auto e = static_cast<size_t>(evidence_);
    hit_[e] = 0.95 * hit_[e] + accepted;
    miss_[e] = 0.95 * miss_[e] + (accepted < proposed ? 1.0 : 0.0);
    // Probes that do not bring checks back come further apart (up to every 256 steps), at once
    // when checks would not pay even if every proposal were taken (a draft about as slow as
    // its target); one that brings them back resets them.
    if (probe_)
      probe_every_ = choose_k() > 0       ? 16
                     : choose_k(1.0) == 0 ? 256
                                          : std::min(2 * probe_every_, 256);
    probe_ = false;
    ++stats_.checks;
  }
  ++stats_.steps;
  stats_.proposed += proposed;
  stats_.accepted += accepted;
  stats_.tokens += produced;
}

Result<SpeculatorFactory> make_speculator_factory(const SpecOptions& o, const Transformer& target,
                                                  const Tokenizer& target_tok,
                                                  const RuntimeOptions& runtime) {
  if (!o.any()) {
    if (o.fixed) return err("--spec-fixed needs --lookup or --draft");
    return SpeculatorFactory();
  }
  if (o.lookup && !o.draft.empty()) return err("--lookup and --draft exclude each other");
  if (o.k < 1 || o.k > Speculator::kMaxK)
    return err("--spec-k must be in [1, {}], got {}", Speculator::kMaxK, o.k);
  TQ_CHECK_OK(check_speculation(target));
  const int k = o.k;
  const bool fixed = o.fixed;
  auto costs = std::make_shared<StepCosts>();  // one model, one machine: learned once
  if (o.lookup)
    return SpeculatorFactory([k, fixed, costs](int64_t) -> Result<std::unique_ptr<Speculator>> {
      return std::make_unique<Speculator>(std::make_unique<LookupProposer>(), k, costs, fixed);
    });
  TQ_TRY(ModelSource d, open_model(o.draft));
  TQ_TRY(Tokenizer dtok, load_model_tokenizer(d));
  TQ_TRY(std::unique_ptr<Transformer> dm, Transformer::load(d, runtime));
  std::shared_ptr<const Transformer> draft = std::move(dm);
  if (Status st = DraftProposer::check(*draft, dtok, target, target_tok); !st.ok())
    return err("--draft {}: {}", o.draft, st.error().message);
  return SpeculatorFactory(
      [draft, k, fixed, costs](int64_t capacity) -> Result<std::unique_ptr<Speculator>> {
        return std::make_unique<Speculator>(DraftProposer::make(draft, capacity), k, costs, fixed);
      });
}

namespace {
// Proposals beyond the tokens the generation may still take would be checked for nothing.
int64_t gen_room(const Generation& gen) { return gen.max_tokens() - gen.count() - 1; }
}  // namespace

Checked take_checked(Generation& gen, std::span<float> rows, int64_t vocab,
                     std::span<const int32_t> proposals, std::vector<int32_t>* history) {
  Checked c;
  const size_t p = proposals.size();
  for (size_t i = 0; i <= p; ++i) {
    const int32_t t = gen.sample(rows.subspan(i * static_cast<size_t>(vocab), vocab));
    c.text += gen.accept(t);
    history->push_back(t);
    ++c.taken;
    const bool match = i < p && t == proposals[i];
    if (match) ++c.accepted;
    if (!match || gen.finish() != Finish::kNone) break;
  }
  return c;
}

Status decode_loop(const Transformer& model, KvCache& cache, Generation& gen,
                   std::vector<int32_t>* history, std::span<float> logits, Speculator* spec,
                   const std::function<void(std::string_view)>& emit) {
  using Clock = std::chrono::steady_clock;
  const int64_t vocab = model.config().vocab_size;
  emit(gen.accept(gen.sample(logits.first(static_cast<size_t>(vocab)))));
  history->push_back(gen.tokens().back());
  std::vector<int32_t> step, proposals;
  while (gen.finish() == Finish::kNone) {  // no forward for a token nobody will sample
    const auto t0 = Clock::now();
    proposals.clear();
    if (spec) {
      TQ_TRY(proposals, spec->next(*history, gen_room(gen)));
    }
    step.assign(1, history->back());
    step.insert(step.end(), proposals.begin(), proposals.end());
    const int64_t n0 = cache.n, rows = static_cast<int64_t>(step.size());
    const SeqStep one{step, &cache, logits.first(static_cast<size_t>(rows * vocab)), rows > 1,
                      /*per_token=*/true};
    TQ_CHECK_OK(model.forward_batch(std::span(&one, 1)));
    const Checked c = take_checked(gen, one.logits, vocab, proposals, history);
    cache.n = n0 + c.taken;  // the rejected proposals' positions are written over next
    if (spec)
      spec->record(static_cast<int>(proposals.size()), c.accepted, c.taken,
                   std::chrono::duration<double>(Clock::now() - t0).count());
    emit(c.text);
  }
  return ok_status();
}

}  // namespace tq
