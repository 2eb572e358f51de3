#include "serve/prefill_cap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace tq::serve {
namespace {

// A simulated server: two decode rows of 1 ms each; a step's prompt tokens add `fixed` plus
// `per` each, times a noise factor.
struct Sim {
  double fixed, per, noise = 0.0;
  std::mt19937 rng{7};
  double step(int64_t n) {
    std::uniform_real_distribution<double> u(1.0 - noise, 1.0 + noise);
    return (2e-3 + (n > 0 ? fixed + per * static_cast<double>(n) : 0.0)) * u(rng);
  }
};

// Warms the decode estimate, then runs `steps` capped steps; returns the last allowance and the
// worst step of the second half (after it settled), in ms.
std::pair<int64_t, double> run(PrefillCap& cap, Sim& sim, int steps) {
  for (int i = 0; i < 5; ++i) cap.record(2, 0, sim.step(0), true);
  double worst = 0;
  for (int i = 0; i < steps; ++i) {
    const int64_t n = cap.allowance(2);
    const double s = sim.step(n);
    cap.record(2, n, s, true);
    if (i >= steps / 2) worst = std::max(worst, s * 1e3);
  }
  return {cap.allowance(2), worst};
}

TEST(PrefillCap, UncappedUntilMeasuredOrWhenOff) {
  PrefillCap off(0.0, 256);
  off.record(2, 0, 2e-3, true);
  EXPECT_EQ(off.allowance(2), 256);
  PrefillCap on(2.0, 256);
  EXPECT_EQ(on.allowance(2), 256);  // no decode-only step timed yet
  on.record(2, 0, 2e-3, true);
  EXPECT_EQ(on.allowance(0), 256);  // nothing decodes: nothing to protect
  EXPECT_EQ(on.allowance(2), 1);    // the first capped step is measured at one token
}

TEST(PrefillCap, FindsTheTokensThatFillTheRoom) {
  // Room at factor 2 = 2 ms, aimed at 85% of it; 0.4 ms fixed + 0.2 ms a token: 6.5 tokens.
  PrefillCap cap(2.0, 256);
  Sim sim{0.4e-3, 0.2e-3};
  auto [n, worst] = run(cap, sim, 60);
  EXPECT_GE(n, 5);
  EXPECT_LE(n, 6);
  EXPECT_LE(worst, 2.0 + 1.7 + 1e-9);
}

TEST(PrefillCap, OneTokenWhenTheFixedPartFillsTheRoom) {
  PrefillCap cap(2.0, 256);
  Sim sim{2.0e-3, 0.3e-3};
  auto [n, worst] = run(cap, sim, 40);
  EXPECT_EQ(n, 1);
  EXPECT_NEAR(worst, 4.3, 1e-6);  // the floor: one token a step
}

TEST(PrefillCap, NoisyStepsStayNearTheFactor) {
  PrefillCap cap(2.0, 256);
  Sim sim{0.4e-3, 0.1e-3, 0.1};  // 13 tokens fill the aimed room; steps vary ±10%
  auto [n, worst] = run(cap, sim, 200);
  EXPECT_GE(n, 8);
  EXPECT_LE(n, 20);
  EXPECT_LE(worst, 4.0 * 1.25);
}

TEST(PrefillCap, ShrinksAsTokensGetDearer) {
  // Later prompt tokens attend over more positions: the per-token cost grows.
  PrefillCap cap(2.0, 256);
  Sim sim{0.4e-3, 0.1e-3};
  run(cap, sim, 40);
  const int64_t early = cap.allowance(2);
  sim.per = 0.8e-3;
  auto [late, worst] = run(cap, sim, 40);
  EXPECT_LT(late, early);
  EXPECT_LE(late, 2);
  EXPECT_LE(worst, 4.0 + 1e-9);
}

TEST(PrefillCap, BurstStepsTeachNothing) {
  PrefillCap cap(2.0, 256);
  Sim sim{2.0e-3, 0.3e-3};
  run(cap, sim, 20);
  cap.record(2, 128, 0.2, /*capped=*/false);  // a whole chunk: not the cap's doing
  EXPECT_EQ(cap.allowance(2), 1);
  cap.record(2, 1, 1.9e-3 + 2e-3, true);  // a token under the room, with no room for a second
  EXPECT_EQ(cap.allowance(2), 1);
}

}  // namespace
}  // namespace tq::serve
