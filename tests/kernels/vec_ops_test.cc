// Decode attention (attend_one) and prefill attention (attend_block) on every compiled SIMD
// target against a double-precision softmax-weighted sum.
#include "kernels/vec_ops.h"

#include <gtest/gtest.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <cmath>
#include <random>
#include <vector>

namespace tq {
namespace {

std::vector<float> ref_attend(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, int64_t len, int64_t ld, int64_t hd,
                              double scale) {
  std::vector<double> s(static_cast<size_t>(len));
  double m = -1e300, sum = 0.0;
  for (int64_t j = 0; j < len; ++j) {
    double d = 0.0;
    for (int64_t i = 0; i < hd; ++i) d += double(q[i]) * k[j * ld + i];
    s[j] = scale * d, m = std::max(m, s[j]);
  }
  for (double& x : s) x = std::exp(x - m), sum += x;
  std::vector<float> out(static_cast<size_t>(hd));
  for (int64_t i = 0; i < hd; ++i) {
    double o = 0.0;
    for (int64_t j = 0; j < len; ++j) o += s[j] / sum * v[j * ld + i];
    out[i] = static_cast<float>(o);
  }
  return out;
}

TEST(AttendOne, EqualsTheDoubleReferenceOnEveryTarget) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (int64_t hd : {int64_t{8}, int64_t{24}, int64_t{64}, int64_t{128}, int64_t{100}})
    for (int64_t len : {int64_t{1}, int64_t{5}, int64_t{17}, int64_t{300}}) {
      const int64_t ld = 3 * hd + 4;  // rows strided as in a GQA cache
      std::vector<float> q(static_cast<size_t>(hd)), k(static_cast<size_t>(len * ld)), v(k.size());
      for (float& x : q) x = 2.0f * nd(rng);  // sharp enough that a few positions dominate
      for (float& x : k) x = nd(rng);
      for (float& x : v) x = nd(rng);
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
      const std::vector<float> want = ref_attend(q, k, v, len, ld, hd, scale);
      for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(t);
        SCOPED_TRACE(std::string(hwy::TargetName(t)) + " hd " + std::to_string(hd) + " len " +
                     std::to_string(len));
        std::vector<float> scores(static_cast<size_t>(len)), out(static_cast<size_t>(hd), NAN);
        attend_one(q.data(), k.data(), v.data(), len, ld, hd, static_cast<float>(scale),
                   scores.data(), out.data());
        for (int64_t i = 0; i < hd; ++i) ASSERT_NEAR(out[i], want[i], 2e-5) << "i " << i;
        ++checked;
      }
      hwy::SetSupportedTargetsForTest(0);
    }
  EXPECT_GT(checked, 0);
}

// Prefill attention: blocks of 1..8 queries (causal: query i sees len0 + i positions) against
// the same double reference, on every target, for head sizes that take the tiled path and one
// (100) that falls back to attend_one per query.
TEST(AttendBlock, EqualsTheDoubleReferenceOnEveryTarget) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (int64_t hd : {int64_t{64}, int64_t{128}, int64_t{100}})
    for (int64_t nq : {int64_t{1}, int64_t{5}, int64_t{8}})
      for (int64_t len0 : {int64_t{1}, int64_t{20}, int64_t{130}}) {
        const int64_t ld = 2 * hd + 4, qld = 3 * hd, old = hd + 8;
        const int64_t len = len0 + nq - 1, lpad = (len + 15) / 16 * 16;
        std::vector<float> q(static_cast<size_t>(nq * qld)), k(static_cast<size_t>(len * ld)),
            v(k.size());
        for (float& x : q) x = 2.0f * nd(rng);
        for (float& x : k) x = nd(rng);
        for (float& x : v) x = nd(rng);
        const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
        for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
          hwy::SetSupportedTargetsForTest(t);
          SCOPED_TRACE(std::string(hwy::TargetName(t)) + " hd " + std::to_string(hd) + " nq " +
                       std::to_string(nq) + " len0 " + std::to_string(len0));
          std::vector<float> kt(static_cast<size_t>(hd * lpad), NAN);
          transpose_keys(k.data(), len, ld, hd, lpad, kt.data());
          std::vector<float> scores(static_cast<size_t>(nq * (len0 + nq + 16)));
          std::vector<float> out(static_cast<size_t>(nq * old), NAN);
          attend_block(q.data(), nq, qld, k.data(), kt.data(), lpad, v.data(), ld, hd, len0,
                       static_cast<float>(scale), scores.data(), out.data(), old);
          for (int64_t i = 0; i < nq; ++i) {
            std::vector<float> qi(q.begin() + i * qld, q.begin() + i * qld + hd);
            const std::vector<float> want = ref_attend(qi, k, v, len0 + i, ld, hd, scale);
            for (int64_t d = 0; d < hd; ++d)
              ASSERT_NEAR(out[i * old + d], want[d], 2e-5) << "query " << i << " d " << d;
          }
          ++checked;
        }
        hwy::SetSupportedTargetsForTest(0);
      }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace tq
