#include "serve/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>

#include "model/kv_blocks.h"
#include "serve/logprobs.h"

namespace tq::serve {
namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

struct Scheduler::Seq {
  std::shared_ptr<Job> job;
  KvCache cache;
  Generation gen;
  std::vector<float> logits;
  int choice = 0;            // which of the job's `n` choices
  int forks = 0;             // choices still to fork from this one when its prefill ends
  int64_t blocks = 0;        // KV blocks held (a sequence that forks: its choices' too, until then)
  int64_t prefilled = 0;     // prompt tokens in the cache
  int64_t burst_end = 0;     // prompt tokens up to which chunks are whole (prefill_burst)
  std::vector<Digest> keys;  // the prompt's block chain (with a prompt cache)
  int64_t chunk = 0;         // prompt tokens fed this step (0: a decode row)
  int32_t last = -1;         // the token to feed next (decode)
  Clock::time_point last_emit{};
  // Speculation: the proposer, the prompt and tokens so far, this step's fed tokens.
  std::unique_ptr<Speculator> spec;
  std::vector<int32_t> history, feed;
  bool decoding() const { return prefilled == static_cast<int64_t>(job->prompt.size()); }
};

Scheduler::Scheduler(const Transformer& model, const Tokenizer& tok, SchedulerOptions o, Metrics& m)
    : model_(model),
      vocab_(static_cast<size_t>(model.config().vocab_size)),
      tok_(tok),
      o_(o),
      m_(m),
      max_running_(o.batch > 0 ? std::min(o.batch, o.max_seqs) : o.max_seqs),
      cap_(o.max_itl_factor, o.step_tokens) {
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { shutdown(); }

bool Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mu_);
    const int64_t free_slots = std::max<int64_t>(0, max_running_ - running_count_);
    if (stop_ || static_cast<int64_t>(waiting_.size()) >= o_.queue + free_slots) return false;
    waiting_.push_back(std::move(job));
    m_.waiting = static_cast<int64_t>(waiting_.size());
  }
  cv_.notify_one();
  return true;
}

bool Scheduler::idle() const {
  std::lock_guard lock(mu_);
  return waiting_.empty() && running_count_ == 0;
}

void Scheduler::shutdown() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

GenerationOptions Scheduler::choice_options(const Job& j, int choice) {
  GenerationOptions g = j.gen;
  g.sampling.seed = j.seed_of(choice);
  return g;
}

void Scheduler::end_job(Job& j, const char* reason, std::string error) {
  const auto now = Clock::now();
  const bool admitted = j.admitted != Clock::time_point{};
  const bool started = j.first_token != Clock::time_point{};
  JobTimings t;
  t.queue_ms = ms_between(j.arrived, admitted ? j.admitted : now);
  t.prefill_ms = admitted ? ms_between(j.admitted, started ? j.first_token : now) : 0;
  t.decode_ms = started ? ms_between(j.first_token, now) : 0;
  t.ttft_ms = started ? ms_between(j.arrived, j.first_token) : 0;
  m_.count_finish(reason);
  if (started) m_.ttft.observe(t.ttft_ms / 1000);
  m_.queue_time.observe(t.queue_ms / 1000);
  t.spec_steps = j.spec_steps, t.spec_proposed = j.spec_proposed;
  t.spec_accepted = j.spec_accepted;
  if (o_.log)
    std::fprintf(stderr,
                 "tq serve: %s prompt=%zu completion=%lld cached=%lld (%.1fms) queue=%.1fms "
                 "prefill=%.1fms decode=%.1fms finish=%s\n",
                 j.id.c_str(), j.prompt.size(), static_cast<long long>(j.generated),
                 static_cast<long long>(j.cached), j.cache_ms, t.queue_ms, t.prefill_ms,
                 t.decode_ms, reason);
  j.finish(reason, t, std::move(error));
}

void Scheduler::retire(Seq& s, const char* reason, std::string error) {
  Job& j = *s.job;
  const int64_t n = s.gen.count();
  j.generated += n;
  j.finish_choice(s.choice, reason, n);
  m_.kv_bytes -= s.cache.bytes();
  blocks_used_ -= s.blocks;
  m_.kv_blocks_used = blocks_used_;
  // Choices never forked end with this one.
  for (int i = 0; i < s.forks; ++i) j.finish_choice(s.choice + 1 + i, reason, 0);
  j.choices_left -= 1 + s.forks;
  const std::string_view r(reason);
  if (j.end_reason.empty() && (r == "cancelled" || r == "error")) {
    j.end_reason = reason;
    j.end_error = std::move(error);
  }
  if (j.choices_left == 0)
    end_job(j, j.end_reason.empty() ? reason : j.end_reason.c_str(), j.end_error);
  s.job.reset();
}

void Scheduler::run() {
  std::vector<std::unique_ptr<Seq>> running;
  for (;;) {
    std::vector<std::shared_ptr<Job>> dropped;  // cancelled while waiting
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty() || !running.empty(); });
      if (stop_) break;
      std::erase_if(waiting_, [&](const std::shared_ptr<Job>& j) {
        if (j->cancelled) dropped.push_back(j);
        return j->cancelled.load();
      });
      // First come, first served: the head waits until its `n` rows and its KV blocks fit (rows:
      // or nothing runs; blocks: planning capped max_tokens so that it fits alone).
      auto fits = [&](const Job& j) {
        const int64_t blocks =
            j.n * kv_blocks_for(static_cast<int64_t>(j.prompt.size()) + j.gen.max_tokens);
        const bool rows = running.empty() || static_cast<int>(running.size()) + j.n <= max_running_;
        return rows && (o_.kv_blocks == 0 || blocks_used_ + blocks <= o_.kv_blocks);
      };
      while (!waiting_.empty() && fits(*waiting_.front())) {
        auto job = std::move(waiting_.front());
        waiting_.pop_front();
        const auto len = static_cast<int64_t>(job->prompt.size());
        const int64_t blocks = kv_blocks_for(len + job->gen.max_tokens);
        job->admitted = Clock::now();
        job->choices_left = job->n;
        auto s = std::unique_ptr<Seq>(new Seq{job, model_.new_cache(blocks * kKvBlock),
                                              Generation(tok_, choice_options(*job, 0)),
                                              std::vector<float>(vocab_)});
        speculate(*s);
        s->forks = job->n - 1;
        s->blocks = blocks * job->n;
        blocks_used_ += s->blocks;
        m_.kv_blocks_used = blocks_used_;
        m_.prompt_tokens += len;
        m_.kv_bytes += s->cache.bytes();
        if (o_.prompt_cache != nullptr) reuse_cached(*s);
        // A prompt of at most prefill_burst tokens past its cached prefix goes in whole chunks;
        // a longer one (a document) yields to the running streams from its first token.
        s->burst_end = len - s->prefilled <= o_.prefill_burst ? len : s->prefilled;
        running.push_back(std::move(s));
      }
      running_count_ = static_cast<int64_t>(running.size());
      m_.waiting = static_cast<int64_t>(waiting_.size());
    }
    for (auto& j : dropped) end_job(*j, "cancelled");
    for (auto& s : running)
      if (s->job->cancelled) retire(*s, "cancelled");
    std::erase_if(running, [](const auto& s) { return !s->job; });
    m_.running = static_cast<int64_t>(running.size());
    if (!running.empty()) step(running);
    std::erase_if(running, [](const auto& s) { return !s->job; });
    m_.running = static_cast<int64_t>(running.size());
    std::lock_guard lock(mu_);
    running_count_ = static_cast<int64_t>(running.size());
  }
  for (auto& s : running) retire(*s, "cancelled", "the server is shutting down");
  std::lock_guard lock(mu_);
  for (auto& j : waiting_) end_job(*j, "cancelled", "the server is shutting down");
  waiting_.clear();
  running_count_ = 0;
  m_.running = 0;
  m_.waiting = 0;
}

void Scheduler::step(std::vector<std::unique_ptr<Seq>>& running) {
  std::vector<SeqStep> steps;
  std::vector<Seq*> fed;
  int64_t budget = o_.step_tokens;
  for (auto& s : running) {
    if (!s->decoding()) continue;
    s->chunk = 0;
    s->feed.assign(1, s->last);
    if (s->spec) {
      // The proposer fails only on a draft's forward error: that step goes plain.
      auto p = s->spec->next(s->history, s->gen.max_tokens() - s->gen.count() - 1);
      if (p.ok()) s->feed.insert(s->feed.end(), p->begin(), p->end());
    }
    const size_t rows = s->feed.size();
    steps.push_back({s->feed, &s->cache, std::span(s->logits).first(rows * vocab_), rows > 1,
                     /*per_token=*/true});
    fed.push_back(s.get());
    budget -= static_cast<int64_t>(rows);
  }
  const int64_t decode_rows = o_.step_tokens - budget;
  int64_t allowance = cap_.allowance(decode_rows), prefill_tokens = 0;
  bool prefilling = false, capped = true;  // capped: no prompt token came in a burst
  for (auto& s : running) {                // in admission order
    if (s->decoding()) continue;
    const bool burst = s->prefilled < s->burst_end;
    if (!burst && allowance < 1) continue;
    const auto& p = s->job->prompt;
    // Cut at multiples of prefill_chunk; a cap ends a chunk earlier (a prefill step gives each
    // position the same bits at any chunk length, one token too: SeqStep::prefill).
    const int64_t cut = std::min<int64_t>(static_cast<int64_t>(p.size()),
                                          (s->prefilled / o_.prefill_chunk + 1) * o_.prefill_chunk);
    const int64_t end = burst || allowance >= cut - s->prefilled ? cut : s->prefilled + allowance;
    const int64_t n = end - s->prefilled;
    if (prefilling && n > budget) break;
    allowance = std::max<int64_t>(0, allowance - n);
    capped = capped && !burst;
    prefill_tokens += n;
    s->chunk = n;
    steps.push_back(
        {.tokens = std::span<const int32_t>(p.data() + s->prefilled, static_cast<size_t>(n)),
         .cache = &s->cache,
         .logits = s->logits,
         .prefill = true});
    fed.push_back(s.get());
    budget -= n;
    prefilling = true;
  }
  const auto t0 = Clock::now();
  Status st = model_.forward_batch(steps);
  const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
  cap_.record(decode_rows, prefill_tokens, step_s, capped);
  if (prefill_tokens > 0 && decode_rows > 0)
    m_.prefill_allowance = std::min(cap_.allowance(decode_rows), o_.step_tokens);
  ++m_.steps;
  for (const auto& x : steps) m_.step_rows += static_cast<int64_t>(x.tokens.size());
  if (!st.ok()) {
    std::fprintf(stderr, "tq serve: error: %s\n", st.error().message.c_str());
    for (Seq* s : fed) retire(*s, "error", st.error().message);
    return;
  }
  std::vector<std::unique_ptr<Seq>> forked;
  for (Seq* s : fed) {
    if (s->chunk > 0) {
      s->prefilled += s->chunk;
      if (!s->decoding()) continue;  // more prompt to go: these logits are not wanted
      if (o_.prompt_cache != nullptr) store_cached(*s);
      // `n` choices share the prefill: each fork starts from a copy of its cache and logits.
      const int64_t own = s->blocks / (1 + s->forks);
      for (int i = 1; i <= s->forks; ++i) {
        auto f = std::unique_ptr<Seq>(
            new Seq{s->job, s->cache, Generation(tok_, choice_options(*s->job, s->choice + i)),
                    s->logits, s->choice + i, 0, own, s->prefilled});
        speculate(*f);
        s->blocks -= own;
        m_.kv_bytes += f->cache.bytes();
        forked.push_back(std::move(f));
      }
      s->forks = 0;
    }
    if (s->chunk == 0 && s->spec)
      take_checked_rows(*s, step_s);
    else
      emit(*s);
  }
  for (auto& f : forked) {
    emit(*f);
    if (f->job) running.push_back(std::move(f));
  }
}

void Scheduler::speculate(Seq& s) {
  if (!o_.speculate) return;
  auto sp = o_.speculate(s.cache.capacity);
  if (!sp.ok()) return;  // a factory that refuses runs the sequence plain
  s.spec = std::move(*sp);
  s.history = s.job->prompt;
  s.logits.resize(static_cast<size_t>(s.spec->max_k() + 1) * vocab_);
}

void Scheduler::emit(Seq& s) { emit(s, std::span(s.logits).first(vocab_)); }

void Scheduler::take_checked_rows(Seq& s, double step_s) {
  const std::shared_ptr<Job> job = s.job;  // emit may retire s
  const int proposed = static_cast<int>(s.feed.size()) - 1;
  const int64_t n0 = s.cache.n - static_cast<int64_t>(s.feed.size());
  // Counted before the rows are taken: the last one may end the job and report them.
  ++job->spec_steps;
  job->spec_proposed += proposed;
  int taken = 0, accepted = 0;
  for (int i = 0; i <= proposed; ++i) {
    const int32_t id =
        emit(s, std::span(s.logits).subspan(static_cast<size_t>(i) * vocab_, vocab_));
    ++taken;
    const bool match = i < proposed && id == s.feed[static_cast<size_t>(i) + 1];
    if (match) ++accepted, ++job->spec_accepted;
    if (!s.job || !match) break;  // retired, or the rest of the rows followed another token
  }
  s.cache.n = n0 + taken;  // the rejected proposals' positions are written over next
  s.spec->record(proposed, accepted, taken, step_s);
  if (proposed > 0) ++m_.spec_checks;
  m_.spec_proposed += proposed, m_.spec_accepted += accepted;
}

int64_t Scheduler::cache_room() const {
  if (o_.kv_blocks == 0) return 4096;  // no budget: a fixed bound
  return std::max<int64_t>(0, o_.kv_blocks - blocks_used_);
}

void Scheduler::reuse_cached(Seq& s) {
  PromptCache& pc = *o_.prompt_cache;
  const auto t0 = Clock::now();
  const auto& p = s.job->prompt;
  const auto len = static_cast<int64_t>(p.size());
  pc.evict_to(cache_room());  // the cache yields to admitted sequences
  s.keys = pc.chain(p);
  auto found = pc.lookup(p, s.keys, (len - 1) / kKvBlock);
  const int64_t h = usable_cached_blocks(static_cast<int64_t>(found.size()), len);
  for (int64_t b = 0; b < h; ++b) kv_block_write(s.cache, pc.shape(), b, *found[b]);
  s.cache.n = s.prefilled = h * kKvBlock;
  s.job->cached = h * kKvBlock;
  pc.count_query(h);
  pc.evict_to(cache_room());  // blocks promoted from disk
  s.job->cache_ms = ms_between(t0, Clock::now());
}

void Scheduler::store_cached(Seq& s) {
  PromptCache& pc = *o_.prompt_cache;
  const int64_t full = static_cast<int64_t>(s.job->prompt.size()) / kKvBlock;
  if (cache_room() == 0 && !pc.has_disk()) return;  // it would be dropped at once
  // Room first, in one batch (evicted dirty blocks are written together); a prompt longer
  // than the room overshoots it by at most 16 blocks, within the budget's margin.
  int64_t missing = 0;
  for (int64_t b = 0; b < full; ++b) missing += !pc.contains(s.keys[b]);
  pc.evict_to(cache_room() - missing);
  for (int64_t b = 0; b < full; ++b) {
    if (pc.touch(s.keys[b])) continue;
    if (pc.memory_blocks() >= cache_room() + kKvBlock) pc.evict_to(cache_room());
    auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(pc.shape().bytes()));
    kv_block_read(s.cache, pc.shape(), b, *bytes);
    pc.insert(s.job->prompt, s.keys, b, std::move(bytes));
  }
  pc.evict_to(cache_room());
}

int32_t Scheduler::emit(Seq& s, std::span<float> row) {
  Job& j = *s.job;
  std::optional<TokenLogprob> lp;
  if (j.top_logprobs >= 0) scratch_.assign(row.begin(), row.end());  // sampling adjusts in place
  const int32_t id = s.gen.sample(row);
  if (j.top_logprobs >= 0) lp = token_logprob(scratch_, id, j.top_logprobs);
  const auto now = Clock::now();
  if (j.first_token == Clock::time_point{}) j.first_token = now;
  if (s.last_emit != Clock::time_point{}) m_.itl.observe(ms_between(s.last_emit, now) / 1000);
  s.last_emit = now;
  const int64_t before = s.gen.count();
  const std::string text = s.gen.accept(id);
  const bool counted = s.gen.count() > before;  // end tokens are neither text nor counted
  j.append(s.choice, text, counted && lp ? &*lp : nullptr);
  m_.generation_tokens += s.gen.count() - before;
  s.last = id;
  if (s.spec) s.history.push_back(id);
  if (s.gen.finish() != Finish::kNone) retire(s, finish_name(s.gen.finish()));
  return id;
}

}  // namespace tq::serve
