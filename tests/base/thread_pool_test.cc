// ThreadPool: every index covered exactly once, slices aligned, reuse across many loops.
#include <gtest/gtest.h>

#include <atomic>
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

}  // namespace
}  // namespace tq
