#include "base/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TQ_PAUSE() _mm_pause()
#else
#define TQ_PAUSE() ((void)0)
#endif

namespace tq {

namespace {
// About 50-100 µs of spinning: longer than the gap between two matmuls of a decode step,
// short enough not to burn a core while the pool waits for the next request.
constexpr int kSpins = 20000;
// Slices per thread at most (claim_ has room for this many per thread).
constexpr int kMaxPerThread = 16;
}  // namespace

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = hardware_threads();
  const size_t cap = static_cast<size_t>(threads) * kMaxPerThread;
  claim_ = std::make_unique<std::atomic<uint32_t>[]>(cap);
  for (size_t i = 0; i < cap; ++i) claim_[i].store(0, std::memory_order_relaxed);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::slices(int64_t n, int64_t align, int per_thread) const {
  const int64_t units = (n + std::max<int64_t>(align, 1) - 1) / std::max<int64_t>(align, 1);
  return static_cast<int>(std::min<int64_t>(
      units, static_cast<int64_t>(size()) * std::clamp(per_thread, 1, kMaxPerThread)));
}

std::pair<int64_t, int64_t> ThreadPool::slice_bounds(int64_t n, int64_t align, int slices, int i) {
  align = std::max<int64_t>(align, 1);
  const int64_t units = (n + align - 1) / align;
  return {std::min(n, units * i / slices * align), std::min(n, units * (i + 1) / slices * align)};
}

void ThreadPool::wait_step(int self) {
  IdleWork* w = idle_.load(std::memory_order_acquire);
  if (w == nullptr || !w->step(self)) TQ_PAUSE();
}

void ThreadPool::drain(uint32_t gen, int self) {
  const uint32_t parts = parts_, open = 2 * gen;
  const uint32_t own = static_cast<uint32_t>(first_slice(self, static_cast<int>(parts)));
  for (uint32_t k = 0; k < parts; ++k) {
    const uint32_t idx = (own + k) % parts;
    uint32_t v = claim_[idx].load(std::memory_order_acquire);
    if (v != open || !claim_[idx].compare_exchange_strong(v, open + 1, std::memory_order_acq_rel))
      continue;
    // The slice is ours: the loop's fields stay put until done_ counts it.
    const auto [b, e] = slice_bounds(n_, align_, static_cast<int>(parts), static_cast<int>(idx));
    if (b < e) (*fn_)(b, e);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker(int self) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && i < kSpins; ++i) {
      wait_step(self);
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    drain(g, self);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t align, int per_thread) {
  if (n <= 0) return;
  if (workers_.empty() || n <= align) {
    fn(0, n);
    return;
  }
  const uint32_t gen = ++gen_;
  fn_ = &fn;
  n_ = n;
  align_ = std::max<int64_t>(align, 1);
  parts_ = static_cast<uint32_t>(slices(n, align, per_thread));
  done_.store(0, std::memory_order_relaxed);
  for (uint32_t i = 0; i < parts_; ++i) claim_[i].store(2 * gen, std::memory_order_relaxed);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();
  drain(gen, 0);
  while (done_.load(std::memory_order_acquire) != static_cast<int>(parts_)) wait_step(0);
  fn_ = nullptr;
}

}  // namespace tq
