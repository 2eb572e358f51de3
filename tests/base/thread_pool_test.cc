// ThreadPool: every index covered exactly once, slices aligned, reuse across many loops.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "base/thread_pool.h"

namespace tq {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceWithAlignedSlices) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {1, 7, 64, 1001}) {
      for (auto [align, per] : {std::pair<int64_t, int>{1, 1}, {4, 1}, {8, 1}, {1, 4}, {8, 4}}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> calls{0};
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              calls++;
              EXPECT_EQ(b % align, 0);
              if (e != n) {
                EXPECT_EQ(e % align, 0);
              }
              for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
            },
            align, per);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1);
        EXPECT_LE(calls.load(), threads * per);
        if (threads == 1 || per == 1) continue;
        // Several slices per thread when there is room for them.
        if ((n + align - 1) / align >= threads * per) {
          EXPECT_GT(calls.load(), threads);
        }
      }
    }
  }
}

TEST(ThreadPool, RunsManyLoopsBackToBack) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 2000; ++rep)
    pool.parallel_for(10, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 20000);
}

// slices()/slice_bounds() describe exactly the slices parallel_for runs (ReadAhead relies on
// them to know which rows a thread takes next).
TEST(ThreadPool, SliceBoundsAreTheSlicesItRuns) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {5, 64, 1001})
      for (auto [align, per] : {std::pair<int64_t, int>{1, 1}, {8, 1}, {8, 4}}) {
        std::mutex mu;
        std::set<std::pair<int64_t, int64_t>> ran;
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              std::lock_guard<std::mutex> lock(mu);
              ran.insert({b, e});
            },
            align, per);
        if (n <= align) continue;  // run inline as one slice
        std::set<std::pair<int64_t, int64_t>> described;
        const int k = pool.slices(n, align, per);
        for (int i = 0; i < k; ++i) {
          const auto be = ThreadPool::slice_bounds(n, align, k, i);
          if (be.first < be.second) described.insert(be);
        }
        EXPECT_EQ(ran, described) << threads << " threads, n " << n << ", align " << align;
        for (int t = 0; t < threads; ++t) {
          EXPECT_GE(pool.first_slice(t, k), 0);
          EXPECT_LT(pool.first_slice(t, k), k);
        }
        if (k >= threads) {  // each thread's own first slice is distinct
          std::set<int> firsts;
          for (int t = 0; t < threads; ++t) firsts.insert(pool.first_slice(t, k));
          EXPECT_EQ(static_cast<int>(firsts.size()), threads);
        }
      }
  }
}

// Waiting threads do the idle work, each under its own index; none runs after it says done.
TEST(ThreadPool, WaitingThreadsRunTheIdleWork) {
  struct Counting : IdleWork {
    std::atomic<int> calls[3] = {0, 0, 0};
    std::atomic<int> bad{0};
    bool step(int thread) override {
      if (thread < 0 || thread >= 3) {
        bad++;
        return false;
      }
      return calls[thread].fetch_add(1) < 100;  // some work, then nothing left
    }
  } work;
  {
    ThreadPool pool(3);
    pool.set_idle_work(&work);
    std::atomic<int64_t> total{0};
    for (int rep = 0; rep < 50; ++rep)
      pool.parallel_for(30, [&](int64_t b, int64_t e) { total += e - b; });
    EXPECT_EQ(total.load(), 1500);
    // Between loops the workers spin on the idle work before they sleep.
    for (int i = 0; i < 1000 && (work.calls[1] == 0 || work.calls[2] == 0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_GT(work.calls[1].load(), 0);
    EXPECT_GT(work.calls[2].load(), 0);
  }
  EXPECT_EQ(work.bad.load(), 0);
}

}  // namespace
}  // namespace tq
