// A fixed pool of threads for data-parallel loops (work split by output rows). The calling
// thread takes part; idle workers spin briefly, then sleep, so back-to-back loops of a decode
// step start without a system call. Each thread first runs its own slices (thread t: slices
// [t·p/size, (t+1)·p/size) of p), so what it will read next is known while it waits; then it
// claims any slice still unclaimed: a worker the OS has not scheduled yet leaves its slices to
// whoever is free, so an oversubscribed machine degrades gracefully instead of waiting on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace tq {

// Work a waiting thread may do in small steps between looks at what it waits for (a thread
// with no slice left, or a worker between loops): step(thread) does a little (reads a few KB
// ahead) and returns false when it has nothing more to do. Called concurrently, each thread
// with its own index (0 = the caller of parallel_for, 1.. the workers).
class IdleWork {
 public:
  virtual ~IdleWork() = default;
  virtual bool step(int thread) = 0;
};

class ThreadPool {
 public:
  // `threads` in all, the caller included; <= 0 means one per hardware thread.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Splits [0, n) into slices(n, align, per_thread) contiguous slices whose bounds are multiples
  // of `align` (except n) and runs fn(begin, end) once per slice; returns when all are done.
  // More slices per thread even out a late or slow thread on short loops; one keeps each
  // thread's reads one sequential stream. Not reentrant: fn must not call parallel_for on the
  // same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t align = 1,
                    int per_thread = 1);

  // How parallel_for splits: the number of slices, slice i's bounds, and the first slice
  // thread t runs (its own, unless another thread took it first).
  int slices(int64_t n, int64_t align, int per_thread) const;
  static std::pair<int64_t, int64_t> slice_bounds(int64_t n, int64_t align, int slices, int i);
  int first_slice(int thread, int slices) const { return thread * slices / size(); }

  // What waiting threads do (nullptr: spin); `work` must outlive the pool's threads.
  void set_idle_work(IdleWork* work) { idle_.store(work, std::memory_order_release); }

  static int hardware_threads();

 private:
  void worker(int self);
  // Runs slices of generation `gen`, thread `self`'s own first, until none is left unclaimed.
  void drain(uint32_t gen, int self);
  // Between looks at a flag: the idle work's next step, or a pause.
  void wait_step(int self);

  std::vector<std::thread> workers_;
  // The current loop; written only while no slice of it can be claimed.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, align_ = 1;
  uint32_t parts_ = 1;  // slices of the current loop
  uint32_t gen_ = 0;    // the caller's count of loops
  // Per slice: 2·gen while slice of loop gen is unclaimed, 2·gen + 1 once claimed. A thread
  // late from an earlier loop finds no value of its own generation left to claim.
  std::unique_ptr<std::atomic<uint32_t>[]> claim_;
  std::atomic<uint32_t> generation_{0};  // what sleeping workers wait on
  std::atomic<int> done_{0};             // slices finished in the current loop
  std::atomic<bool> stop_{false};
  std::atomic<IdleWork*> idle_{nullptr};
};

}  // namespace tq
