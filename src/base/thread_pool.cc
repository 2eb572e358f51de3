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
}  // namespace

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = hardware_threads();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain(uint32_t gen) {
  const uint32_t parts = parts_;
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t idx = static_cast<uint32_t>(t);
    if (static_cast<uint32_t>(t >> 32) != gen || idx >= parts) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
    // The slice is ours: the loop's fields stay put until done_ counts it.
    const int64_t units = (n_ + align_ - 1) / align_;
    const int64_t b = std::min(n_, units * idx / parts * align_);
    const int64_t e = std::min(n_, units * (idx + 1) / parts * align_);
    if (b < e) (*fn_)(b, e);
    done_.fetch_add(1, std::memory_order_acq_rel);
    t = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && i < kSpins; ++i) {
      TQ_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    drain(g);
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
  parts_ = static_cast<uint32_t>(std::min<int64_t>(
      (n + align_ - 1) / align_, static_cast<int64_t>(size()) * std::max(per_thread, 1)));
  done_.store(0, std::memory_order_relaxed);
  ticket_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();
  drain(gen);
  while (done_.load(std::memory_order_acquire) != static_cast<int>(parts_)) TQ_PAUSE();
  fn_ = nullptr;
}

}  // namespace tq
