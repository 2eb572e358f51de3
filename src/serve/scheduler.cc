#include "serve/scheduler.h"

#include <algorithm>
#include <cstdio>

namespace tq::serve {
namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t cache_bytes(const KvCache& c) {
  return static_cast<int64_t>((c.k.size() + c.v.size()) * sizeof(float) +
                              (c.k16.size() + c.v16.size()) * sizeof(uint16_t));
}

}  // namespace

struct Scheduler::Seq {
  std::shared_ptr<Job> job;
  KvCache cache;
  Generation gen;
  std::vector<float> logits;
  int64_t prefilled = 0;  // prompt tokens in the cache
  int64_t chunk = 0;      // prompt tokens fed this step (0: a decode row)
  int32_t last = -1;      // the token to feed next (decode)
  Clock::time_point admitted = Clock::now(), first_token{};
  bool decoding() const { return prefilled == static_cast<int64_t>(job->prompt.size()); }
};

Scheduler::Scheduler(const Transformer& model, const Tokenizer& tok, SchedulerOptions o, Metrics& m)
    : model_(model),
      tok_(tok),
      o_(o),
      m_(m),
      max_running_(o.batch > 0 ? std::min(o.batch, o.max_seqs) : o.max_seqs) {
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

void Scheduler::retire(Seq& s, const char* reason, std::string error) {
  const auto now = Clock::now();
  const bool started = s.first_token != Clock::time_point{};
  JobTimings t;
  t.queue_ms = ms_between(s.job->arrived, s.admitted);
  t.prefill_ms = ms_between(s.admitted, started ? s.first_token : now);
  t.decode_ms = started ? ms_between(s.first_token, now) : 0;
  t.ttft_ms = started ? ms_between(s.job->arrived, s.first_token) : 0;
  const int64_t n = s.gen.count();
  m_.count_finish(reason);
  m_.kv_bytes -= cache_bytes(s.cache);
  if (o_.log)
    std::fprintf(stderr,
                 "tq serve: %s prompt=%zu completion=%lld cached=0 queue=%.1fms prefill=%.1fms "
                 "decode=%.1fms finish=%s\n",
                 s.job->id.c_str(), s.job->prompt.size(), static_cast<long long>(n), t.queue_ms,
                 t.prefill_ms, t.decode_ms, reason);
  s.job->finish(reason, n, t, std::move(error));
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
      while (!waiting_.empty() && static_cast<int>(running.size()) < max_running_) {
        auto job = std::move(waiting_.front());
        waiting_.pop_front();
        const auto len = static_cast<int64_t>(job->prompt.size());
        auto s = std::unique_ptr<Seq>(
            new Seq{job, model_.new_cache(len + job->gen.max_tokens), Generation(tok_, job->gen),
                    std::vector<float>(static_cast<size_t>(model_.config().vocab_size))});
        m_.prompt_tokens += len;
        m_.kv_bytes += cache_bytes(s->cache);
        running.push_back(std::move(s));
      }
      running_count_ = static_cast<int64_t>(running.size());
      m_.waiting = static_cast<int64_t>(waiting_.size());
    }
    for (auto& j : dropped) {
      Seq s{j, KvCache{}, Generation(tok_, j->gen), {}};
      retire(s, "cancelled");
    }
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
  for (auto& j : waiting_) {
    Seq s{j, KvCache{}, Generation(tok_, j->gen), {}};
    retire(s, "cancelled", "the server is shutting down");
  }
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
    steps.push_back({std::span<const int32_t>(&s->last, 1), &s->cache, s->logits, false});
    fed.push_back(s.get());
    --budget;
  }
  bool prefilling = false;
  for (auto& s : running) {  // in admission order
    if (s->decoding()) continue;
    const auto& p = s->job->prompt;
    const int64_t end = std::min<int64_t>(static_cast<int64_t>(p.size()),
                                          (s->prefilled / o_.prefill_chunk + 1) * o_.prefill_chunk);
    const int64_t n = end - s->prefilled;
    if (prefilling && n > budget) break;
    s->chunk = n;
    steps.push_back({std::span<const int32_t>(p.data() + s->prefilled, static_cast<size_t>(n)),
                     &s->cache, s->logits, false});
    fed.push_back(s.get());
    budget -= n;
    prefilling = true;
  }
  Status st = model_.forward_batch(steps);
  ++m_.steps;
  for (const auto& x : steps) m_.step_rows += static_cast<int64_t>(x.tokens.size());
  if (!st.ok()) {
    std::fprintf(stderr, "tq serve: error: %s\n", st.error().message.c_str());
    for (Seq* s : fed) retire(*s, "error", st.error().message);
    return;
  }
  for (Seq* s : fed) {
    if (s->chunk > 0) {
      s->prefilled += s->chunk;
      if (!s->decoding()) continue;  // more prompt to go: these logits are not wanted
    }
    const int32_t id = s->gen.sample(s->logits);
    if (s->first_token == Clock::time_point{}) s->first_token = Clock::now();
    const int64_t before = s->gen.count();
    s->job->append(s->gen.accept(id));
    m_.generation_tokens += s->gen.count() - before;
    s->last = id;
    if (s->gen.finish() != Finish::kNone) retire(*s, finish_name(s->gen.finish()));
  }
}

}  // namespace tq::serve
