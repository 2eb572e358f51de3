#include "model/read_ahead.h"

#include <algorithm>

#include "kernels/packed_matmul.h"
#include "kernels/strip_plan.h"

namespace tq {

namespace {
// Each step requests at least this much, then looks again at what its thread waits for.
constexpr int64_t kStepBytes = 4096;
}  // namespace

ReadAhead::ReadAhead(const ThreadPool& pool, int64_t align, int per_thread, int64_t budget)
    : pool_(pool),
      align_(align),
      budget_(budget),
      per_thread_(per_thread),
      cursors_(static_cast<size_t>(pool.size())) {}

bool ReadAhead::step(int thread) {
  const ProductRows* p = next_.load(std::memory_order_acquire);
  if (p == nullptr || thread < 0 || thread >= static_cast<int>(cursors_.size())) return false;
  Cursor& c = cursors_[static_cast<size_t>(thread)];
  if (c.p != p) {  // a new product: this thread's first slice of it
    int64_t total = 0;
    for (int j = 0; j < p->count; ++j) total += p->w[static_cast<size_t>(j)]->rows;
    const int slices = pool_.slices(total, align_, per_thread_);
    const auto [b, e] =
        ThreadPool::slice_bounds(total, align_, slices, pool_.first_slice(thread, slices));
    c = Cursor{p, b, e};
  }
  if (c.done) return false;
  const int64_t start = c.bytes;
  int64_t off = 0;
  for (int j = 0; j < p->count && c.bytes - start < kStepBytes; ++j) {
    const PackedMatrix& w = *p->w[static_cast<size_t>(j)];
    const int64_t lo = std::max(c.b, off) - off, hi = std::min(c.e, off + w.rows) - off;
    off += w.rows;
    if (j < c.job || lo >= hi) continue;
    if (j > c.job) c.job = j, c.strip = 0;
    // The order the kernel will read in: parts of the range where the int8 kernels or the
    // mxfp8 decode kernel run.
    // (Prepacked codes: the lanes kernel's strips in order.)
    const StripPlan plan(
        w, lo, hi,
        w.lanes == nullptr && (packed_q8_supported(w) || w.format == WeightFormat::kMxfp8));
    while (c.strip < plan.strips && c.bytes - start < kStepBytes && c.bytes < budget_)
      c.bytes += packed_prefetch_q8(w, plan, c.strip, c.strip + 1), ++c.strip;
    if (c.bytes >= budget_) break;
  }
  c.done = c.bytes >= budget_ || c.bytes - start < kStepBytes;  // the budget, or the whole slice
  return c.bytes > start;
}

int64_t ReadAhead::requested(int thread) const {
  return cursors_[static_cast<size_t>(thread)].bytes;
}

}  // namespace tq
