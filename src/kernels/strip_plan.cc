#include "kernels/strip_plan.h"

#include "tensor/dtype.h"

namespace tq {

namespace {
// To L2 (prefetcht1), not L1: what a waiting thread reads ahead (up to a megabyte) would
// only evict itself from a 48 KB L1. An asm statement: GCC 12 deletes _mm_prefetch loops.
inline void prefetch_l2(const uint8_t* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht1 %0" : : "m"(*p));
#else
  __builtin_prefetch(p, 0, 2);
#endif
}

void prefetch_range(const uint8_t* p, int64_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t o = a & ~uintptr_t{63}; o < a + static_cast<uintptr_t>(bytes); o += 64)
    prefetch_l2(reinterpret_cast<const uint8_t*>(o));
}
}  // namespace

int64_t packed_prefetch_q8(const PackedMatrix& w, const StripPlan& plan, int64_t k0, int64_t k1) {
  const int64_t rb = w.row_bytes();
  int64_t rows = 0;
  const int64_t sbytes = w.groups() * static_cast<int64_t>(dtype_size(w.scale_dtype));
  int64_t seg0[8], seg_n[8];
  for (int64_t k = std::max<int64_t>(k0, 0); k < std::min(k1, plan.strips); ++k) {
    const int n = plan.segments(k, seg0, seg_n);
    for (int s = 0; s < n; ++s) {
      rows += seg_n[s];
      // Prepacked codes take as many bytes per row, 32 rows to a strip.
      prefetch_range((w.lanes != nullptr ? w.lanes : w.data) + seg0[s] * rb, seg_n[s] * rb);
      if (w.lane_scales != nullptr) {  // both as many bytes per row, together per strip
        prefetch_range(w.lane_scales + 2 * seg0[s] * sbytes, 2 * seg_n[s] * sbytes);
        continue;
      }
      if (w.scales != nullptr) prefetch_range(w.scales + seg0[s] * sbytes, seg_n[s] * sbytes);
      if (w.biases != nullptr) prefetch_range(w.biases + seg0[s] * sbytes, seg_n[s] * sbytes);
    }
  }
  return rows * (rb + (w.scales != nullptr ? sbytes : 0) + (w.biases != nullptr ? sbytes : 0));
}

}  // namespace tq
