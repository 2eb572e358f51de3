// The order in which the int8-activation kernels (packed_matmul_q8) and the mxfp8 decode kernel
// visit the rows [r0, r1) of a packed matrix: strips of R rows that stay in L1 while every token
// passes over them. Shared by the kernels and by packed_prefetch_q8, which reads rows ahead in
// the same order.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/packed_matrix.h"

namespace tq {

// The most adjacent codes a strip takes from one part of a range.
constexpr int64_t kStripPartBytes = 2048;

struct StripPlan {
  // With parts, a strip is one kernel step's rows (8 below 8 bits and mxfp8, 4 at 8-bit) from S
  // equal parts of [r0, r1), A adjacent rows (at most kStripPartBytes of codes) from each: a core
  // keeps more misses in flight over several distant streams than over one run of adjacent rows
  // (bench/README.md, "What moved it"). Otherwise a strip is R adjacent rows.
  StripPlan(const PackedMatrix& w, int64_t r0, int64_t r1, bool parts) : r0(r0), r1(r1) {
    R = w.bits <= 6 || !parts || w.format == WeightFormat::kMxfp8 ? 8 : 4;
    A = R;
    if (parts) {
      A = 1;
      while (2 * A <= R && 2 * A * w.row_bytes() <= kStripPartBytes) A *= 2;
    }
    S = R / A;
    part = S > 1 ? (r1 - r0) / (S * A) * A : 0;
    tail = r0 + S * part;
    strips = part / A + (r1 - tail + R - 1) / R;
  }

  // Strip k's runs of adjacent rows: seg0[i], seg_n[i] for i < the count returned (<= 8).
  int segments(int64_t k, int64_t* seg0, int64_t* seg_n) const {
    if (k < part / A) {
      for (int s = 0; s < S; ++s) seg0[s] = r0 + s * part + k * A, seg_n[s] = A;
      return S;
    }
    seg0[0] = tail + (k - part / A) * R;
    seg_n[0] = std::min<int64_t>(R, r1 - seg0[0]);
    return 1;
  }

  int R, A, S;
  int64_t r0, r1;
  int64_t part;    // rows per part (parts interleaved strip by strip)
  int64_t tail;    // the rows from here on go in strips of adjacent rows
  int64_t strips;  // in all
};

// How far ahead (bytes) the decode kernels request each row's codes: adjacent strips at least
// the 4 rows one step reads and 8 KB; parts of a range are one stream each, so a short distance
// per part, the A rows a strip takes from it, at least 2 KB (measured: bench/README.md).
inline int64_t strip_prefetch_distance(const PackedMatrix& w, const StripPlan& plan) {
  const int64_t rb = w.row_bytes();
  if (plan.S > 1) return std::max<int64_t>(plan.A, 2048 / rb) * rb;
  return std::max<int64_t>(4, 8192 / rb) * rb;
}

// Requests strips [k0, k1) of the plan (codes, scales and biases) into this core's L2 without
// waiting for them: a thread with nothing to do reads ahead the rows it runs next. Returns the
// bytes requested.
int64_t packed_prefetch_q8(const PackedMatrix& w, const StripPlan& plan, int64_t k0, int64_t k1);

}  // namespace tq
