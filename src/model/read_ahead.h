// Decode is a chain of matrix products separated by short serial work (norms, attention,
// quantizing the activations) and by waits for the slower thread. ReadAhead lets a waiting
// pool thread request into its L2 the first rows it will take in the next product, so the
// memory bus keeps streaming weights through those gaps.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/packed_matrix.h"

namespace tq {

// The matrices of one product of a decode step, in the order their rows are concatenated
// when the pool splits them (FastModel's split_rows).
struct ProductRows {
  std::array<const PackedMatrix*, 3> w{};
  int count = 0;
};

class ReadAhead final : public IdleWork {
 public:
  // Slices as the products' loops split them (`align` rows, `per_thread` slices per thread);
  // rows in the order of packed_matmul_q8 (parts); at most `budget` bytes per thread ahead of
  // each product.
  ReadAhead(const ThreadPool& pool, int64_t align, int per_thread, int64_t budget);

  // The product the pool runs next (nullptr: none).
  void next(const ProductRows* p) { next_.store(p, std::memory_order_release); }
  bool step(int thread) override;
  // Bytes thread has requested of the current product so far (for tests).
  int64_t requested(int thread) const;

 private:
  struct alignas(64) Cursor {
    const ProductRows* p = nullptr;
    int64_t b = 0, e = 0;  // the thread's first slice of the concatenated rows
    int job = 0;           // the matrix being read, and its strip
    int64_t strip = 0;
    int64_t bytes = 0;  // requested so far
    bool done = false;  // the budget reached or the whole slice requested
  };

  const ThreadPool& pool_;
  const int64_t align_, budget_;
  const int per_thread_;
  std::atomic<const ProductRows*> next_{nullptr};
  std::vector<Cursor> cursors_;  // one per pool thread, each touched by its thread only
};

}  // namespace tq
