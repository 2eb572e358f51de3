// Attention over the fast runtime's KV cache (decode: attend_partial; prefill: attend_rows) with
// f32 and f16 elements, and the f16 conversions, on every compiled SIMD target against a
// double-precision softmax-weighted sum of the same (rounded) keys and values; the SiLU product and
// the streaming sum against scalar code.
#include "kernels/vec_ops.h"

#include <gtest/gtest.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace tq {
namespace {

// Keys of one KV head in blocks of 16 positions (kt[(j / 16) * hd * 16 + d * 16 + j % 16]) and
// values in rows (v[j * vld + d]), kept as f32 (already rounded through f16 when f16) and as f16
// bits.
struct Cache {
  int64_t hd, len, vld;
  std::vector<float> kt, v;
  std::vector<uint16_t> kt16, v16;
  float key(int64_t d, int64_t j) const { return kt[(j / 16) * hd * 16 + d * 16 + j % 16]; }
};

Cache make_cache(int64_t hd, int64_t len, std::mt19937& rng, bool f16) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Cache c{hd, len, 2 * hd + 4, {}, {}, {}, {}};
  c.kt.assign(static_cast<size_t>(hd * ((len + 15) / 16 * 16)), 1e4f);  // past len: must not count
  c.v.assign(static_cast<size_t>(len * c.vld), NAN);
  for (int64_t d = 0; d < hd; ++d)
    for (int64_t j = 0; j < len; ++j) c.kt[(j / 16) * hd * 16 + d * 16 + j % 16] = nd(rng);
  for (int64_t j = 0; j < len; ++j)
    for (int64_t d = 0; d < hd; ++d) c.v[j * c.vld + d] = nd(rng);
  if (f16) {
    for (float& x : c.kt) x = f16_to_f32(f32_to_f16(x));
    for (float& x : c.v) x = f16_to_f32(f32_to_f16(x));
    for (float x : c.kt) c.kt16.push_back(f32_to_f16(x));
    for (float x : c.v) c.v16.push_back(f32_to_f16(x));
  }
  return c;
}

// softmax(scale · q · k_j) · v_j over j in [j0, j1), in double.
std::vector<double> ref_attend(const float* q, const Cache& c, int64_t j0, int64_t j1,
                               double scale) {
  std::vector<double> s;
  double m = -1e300, sum = 0.0;
  for (int64_t j = j0; j < j1; ++j) {
    double d = 0.0;
    for (int64_t i = 0; i < c.hd; ++i) d += double(q[i]) * c.key(i, j);
    s.push_back(scale * d), m = std::max(m, s.back());
  }
  for (double& x : s) x = std::exp(x - m), sum += x;
  std::vector<double> out(static_cast<size_t>(c.hd), 0.0);
  for (int64_t i = 0; i < c.hd; ++i)
    for (int64_t j = j0; j < j1; ++j) out[i] += s[j - j0] / sum * c.v[j * c.vld + i];
  return out;
}

// One partial softmax per range, normalized (acc / l), equals the reference over that range; g
// query heads share the KV head, up to 7 (two passes of 4 heads).
TEST(AttendPartial, EqualsTheDoubleReferenceOnEveryTarget) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (bool f16 : {false, true})
    for (int64_t hd : {int64_t{8}, int64_t{64}, int64_t{128}, int64_t{100}})
      for (int64_t g : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}})
        for (auto [j0, j1] : {std::pair<int64_t, int64_t>{0, 1}, {0, 17}, {16, 45}, {32, 300}}) {
          const Cache c = make_cache(hd, j1, rng, f16);
          std::vector<float> q(static_cast<size_t>(g * hd));
          for (float& x : q) x = 2.0f * nd(rng);  // sharp enough that a few positions dominate
          const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
          for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
            hwy::SetSupportedTargetsForTest(t);
            SCOPED_TRACE(std::string(hwy::TargetName(t)) + (f16 ? " f16" : " f32") + " hd " +
                         std::to_string(hd) + " g " + std::to_string(g) + " range " +
                         std::to_string(j0) + ".." + std::to_string(j1));
            std::vector<float> scores(static_cast<size_t>(g * (j1 - j0 + 16)));
            std::vector<float> m(static_cast<size_t>(g)), l(m.size()),
                acc(static_cast<size_t>(g * hd), NAN);
            if (f16)
              attend_partial(q.data(), g, hd, c.kt16.data(), c.v16.data(), c.vld, j0, j1,
                             static_cast<float>(scale), scores.data(), m.data(), l.data(),
                             acc.data());
            else
              attend_partial(q.data(), g, hd, c.kt.data(), c.v.data(), c.vld, j0, j1,
                             static_cast<float>(scale), scores.data(), m.data(), l.data(),
                             acc.data());
            for (int64_t i = 0; i < g; ++i) {
              const std::vector<double> want = ref_attend(q.data() + i * hd, c, j0, j1, scale);
              ASSERT_GE(l[i], 1.0f);  // the maximum's own term
              for (int64_t d = 0; d < hd; ++d)
                ASSERT_NEAR(acc[i * hd + d] / l[i], want[d], 2e-5) << "head " << i << " d " << d;
            }
            ++checked;
          }
          hwy::SetSupportedTargetsForTest(0);
        }
  EXPECT_GT(checked, 0);
}

// Prefill attention: 1..8 query rows, each over its own number of positions, against the same
// double reference, on every target, for f32 and f16 caches and head sizes that take the vector
// path and one (100) whose value pass is scalar; and each row's result alone has the bits it has
// among the others (a chunk's cut must not change a position's bits).
TEST(AttendRows, EqualsTheDoubleReferenceOnEveryTargetAndIgnoresNeighbours) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (bool f16 : {false, true})
    for (int64_t hd : {int64_t{64}, int64_t{128}, int64_t{100}})
      for (int64_t nr : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{8}})
        for (int64_t len0 : {int64_t{1}, int64_t{20}, int64_t{130}}) {
          const int64_t qld = 3 * hd, old = hd + 8;
          std::vector<int64_t> len(static_cast<size_t>(nr));
          for (int64_t i = 0; i < nr; ++i) len[i] = len0 + (i * 7) % 5;  // not in order
          const Cache c = make_cache(hd, len0 + 4, rng, f16);
          std::vector<float> q(static_cast<size_t>(nr * qld));
          for (float& x : q) x = 2.0f * nd(rng);
          const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
          auto run = [&](int64_t i0, int64_t m, float* out) {
            std::vector<float> scores(static_cast<size_t>(4 * (len0 + 4 + 16)));
            if (f16)
              attend_rows(q.data() + i0 * qld, m, qld, len.data() + i0, c.kt16.data(), c.v16.data(),
                          c.vld, hd, static_cast<float>(scale), scores.data(), out, old);
            else
              attend_rows(q.data() + i0 * qld, m, qld, len.data() + i0, c.kt.data(), c.v.data(),
                          c.vld, hd, static_cast<float>(scale), scores.data(), out, old);
          };
          for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
            hwy::SetSupportedTargetsForTest(t);
            SCOPED_TRACE(std::string(hwy::TargetName(t)) + (f16 ? " f16" : " f32") + " hd " +
                         std::to_string(hd) + " rows " + std::to_string(nr) + " len0 " +
                         std::to_string(len0));
            std::vector<float> out(static_cast<size_t>(nr * old), NAN), one(old, NAN);
            run(0, nr, out.data());
            for (int64_t i = 0; i < nr; ++i) {
              const std::vector<double> want = ref_attend(q.data() + i * qld, c, 0, len[i], scale);
              for (int64_t d = 0; d < hd; ++d)
                ASSERT_NEAR(out[i * old + d], want[d], 2e-5) << "row " << i << " d " << d;
              run(i, 1, one.data());
              for (int64_t d = 0; d < hd; ++d)
                ASSERT_EQ(one[d], out[i * old + d]) << "row " << i << " alone, d " << d;
            }
            ++checked;
          }
          hwy::SetSupportedTargetsForTest(0);
        }
  EXPECT_GT(checked, 0);
}

// The vector f16 conversions equal the scalar ones bit for bit (ties, subnormals, overflow).
TEST(F16Convert, EqualsTheScalarConversionOnEveryTarget) {
  std::mt19937 rng(9);
  std::vector<float> x;
  for (int i = 0; i < 1000; ++i) x.push_back(bits_to_f32(static_cast<uint32_t>(rng())));
  for (float f : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f, 1.0f + 1.0f / 2048})
    x.push_back(f);
  std::erase_if(x, [](float f) { return std::isnan(f); });
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(t);
    SCOPED_TRACE(hwy::TargetName(t));
    std::vector<uint16_t> h(x.size());
    f32_to_f16_n(x.data(), static_cast<int64_t>(x.size()), h.data());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(h[i], f32_to_f16(x[i])) << x[i] << " bits " << f32_to_bits(x[i]);
    std::vector<float> back(x.size());
    f16_to_f32_n(h.data(), static_cast<int64_t>(h.size()), back.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(back[i], f16_to_f32(h[i])) << h[i];
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The vector SiLU·up equals the scalar reference (kernels/ops.h) within a few ulps on every
// target, including large |x| where exp overflows or underflows.
TEST(SiluMul, EqualsTheScalarReferenceOnEveryTarget) {
  std::mt19937 rng(10);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> g(1003), u(g.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = nd(rng), u[i] = nd(rng);
  g[0] = -100.0f, g[1] = 100.0f, g[2] = -89.0f, g[3] = 0.0f;
  std::vector<float> want = g;
  silu_mul(want.data(), u.data(), static_cast<int64_t>(want.size()));
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(t);
    SCOPED_TRACE(hwy::TargetName(t));
    std::vector<float> got = g;
    silu_mul_simd(got.data(), u.data(), static_cast<int64_t>(got.size()));
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-30f) << "x " << g[i];
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The vector softmax (distillation's attention backward and KL) equals the scalar one within
// a few ulps of the largest weight on every target, at lengths around the vector widths.
TEST(Softmax, EqualsTheScalarReferenceOnEveryTarget) {
  std::mt19937 rng(14);
  std::normal_distribution<float> nd(0.0f, 6.0f);
  for (int64_t n : {1, 7, 16, 17, 64, 511, 49152}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = nd(rng);
    if (n > 2) x[1] = -200.0f, x[2] = 60.0f;  // one underflows to 0, one dominates
    std::vector<float> want = x;
    softmax(want.data(), n);
    for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(t);
      SCOPED_TRACE(hwy::TargetName(t) + std::string(" n ") + std::to_string(n));
      ASSERT_EQ(max_simd(x.data(), n), *std::max_element(x.begin(), x.end()));
      std::vector<float> got = x;
      softmax_simd(got.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 4e-7f + 2e-6f * want[i]);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(RmsNorm, EqualsTheScalarReferenceOnEveryTarget) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int64_t d : {1, 15, 64, 576, 2048, 2049}) {
    const int64_t rows = 3;
    std::vector<float> x(static_cast<size_t>(rows * d)), w(static_cast<size_t>(d));
    for (float& v : x) v = nd(rng);
    for (float& v : w) v = nd(rng);
    x[0] = 1e3f;  // an outlier feature
    std::vector<float> want(x.size());
    rms_norm(x.data(), w.data(), rows, d, 1e-6f, want.data());
    for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(t);
      SCOPED_TRACE(hwy::TargetName(t));
      std::vector<float> got = x;  // in place, as the runtime calls it
      rms_norm_simd(got.data(), w.data(), rows, d, 1e-6f, got.data());
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5f * std::fabs(want[i]) + 1e-30f)
            << "d " << d << " i " << i;
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

// The bandwidth measure's read: Σx over lengths below, at and past its four parts and 8 KB
// prefetch lead, with tails, on every target, against a double sum.
TEST(StreamSum, EqualsTheSumOnEveryTarget) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> x(20011);
  for (float& v : x) v = ud(rng);
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(t);
    SCOPED_TRACE(hwy::TargetName(t));
    for (int64_t n : {0, 1, 15, 64, 127, 128, 129, 2047, 2048, 2049, 2111, 8192, 20011}) {
      double want = 0.0;
      for (int64_t i = 0; i < n; ++i) want += x[static_cast<size_t>(i)];
      ASSERT_NEAR(stream_sum_f32(x.data(), n), want, 1e-5 * want + 1e-6) << "n " << n;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace tq
