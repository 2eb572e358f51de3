// A fixed pool of threads for data-parallel loops (work split by output rows). The calling
// thread takes part; idle workers spin briefly, then sleep, so back-to-back loops of a decode
// step start without a system call. Slices are claimed, not assigned: a worker the OS has not
// scheduled yet leaves its slice to whoever is free, so an oversubscribed machine degrades
// gracefully instead of waiting on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace tq {

class ThreadPool {
 public:
  // `threads` in all, the caller included; <= 0 means one per hardware thread.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Splits [0, n) into size() · per_thread contiguous slices (at most one per `align` units)
  // whose bounds are multiples of `align` (except n) and runs fn(begin, end) once per slice, on
  // any thread; returns when all are done. More slices per thread even out a late or slow
  // thread on short loops; one keeps each thread's reads one sequential stream. Not
  // reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t align = 1,
                    int per_thread = 1);

  static int hardware_threads();

 private:
  void worker();
  // Claims and runs slices of generation `gen` until none is left.
  void drain(uint32_t gen);

  std::vector<std::thread> workers_;
  // The current loop; written only while no slice of it can be claimed.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, align_ = 1;
  uint32_t parts_ = 1;                   // slices of the current loop
  uint32_t gen_ = 0;                     // the caller's count of loops
  std::atomic<uint64_t> ticket_{0};      // generation << 32 | next slice to claim
  std::atomic<uint32_t> generation_{0};  // what sleeping workers wait on
  std::atomic<int> done_{0};             // slices finished in the current loop
  std::atomic<bool> stop_{false};
};

}  // namespace tq
