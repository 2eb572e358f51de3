// StripPlan: the strips of a row range cover every row exactly once, at most R rows a strip,
// whatever the range, width and order; the int8 kernels and ReadAhead both walk it.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/strip_plan.h"

namespace tq {
namespace {

TEST(StripPlan, StripsCoverEveryRowOnce) {
  for (int bits : {4, 8})
    for (int64_t cols : {576, 2048, 8192})
      for (bool parts : {false, true})
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 1},
                              {0, 8},
                              {3, 67},
                              {0, 1024},
                              {512, 2051},
                              {100, 100}}) {
          SCOPED_TRACE(testing::Message() << bits << "-bit, " << cols << " cols, rows " << r0
                                          << ".." << r1 << (parts ? ", parts" : ""));
          PackedMatrix w;
          w.format = WeightFormat::kAffine, w.bits = bits, w.group = 64;
          w.rows = 4096, w.cols = cols;
          const StripPlan plan(w, r0, r1, parts);
          std::vector<int> hits(static_cast<size_t>(w.rows), 0);
          for (int64_t k = 0; k < plan.strips; ++k) {
            int64_t seg0[8], seg_n[8];
            const int n = plan.segments(k, seg0, seg_n);
            ASSERT_GE(n, 1);
            ASSERT_LE(n, 8);
            int64_t rows = 0;
            for (int s = 0; s < n; ++s) {
              ASSERT_GE(seg0[s], r0);
              ASSERT_LE(seg0[s] + seg_n[s], r1);
              rows += seg_n[s];
              for (int64_t r = seg0[s]; r < seg0[s] + seg_n[s]; ++r) hits[static_cast<size_t>(r)]++;
            }
            EXPECT_LE(rows, plan.R);
            // A strip's runs from parts of adjacent codes: one row, or rows within the part size.
            if (parts && n > 1) {
              EXPECT_TRUE(seg_n[0] == 1 || seg_n[0] * w.row_bytes() <= kStripPartBytes);
            }
          }
          for (int64_t r = 0; r < w.rows; ++r)
            ASSERT_EQ(hits[static_cast<size_t>(r)], r >= r0 && r < r1 ? 1 : 0) << "row " << r;
        }
}

TEST(StripPlan, PartsAreSeveralDistantRuns) {
  PackedMatrix w;
  w.format = WeightFormat::kAffine, w.bits = 4, w.group = 64, w.rows = 2048, w.cols = 2048;
  const StripPlan plan(w, 0, 1024, true);  // 1 KB rows: two adjacent rows from each of four parts
  int64_t seg0[8], seg_n[8];
  ASSERT_EQ(plan.segments(0, seg0, seg_n), 4);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(seg0[s], s * 256);
    EXPECT_EQ(seg_n[s], 2);
  }
  const StripPlan adjacent(w, 0, 1024, false);
  ASSERT_EQ(adjacent.segments(1, seg0, seg_n), 1);
  EXPECT_EQ(seg0[0], 8);
  EXPECT_EQ(seg_n[0], 8);
}

}  // namespace
}  // namespace tq
