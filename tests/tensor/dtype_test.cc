#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace tq {
namespace {

// Independent f16 value from the IEEE binary16 definition.
double f16_reference(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  double v;
  if (e == 0x1F)
    v = m ? std::nan("") : INFINITY;
  else if (e == 0)
    v = std::ldexp(m, -24);
  else
    v = std::ldexp(1024 + m, e - 25);
  return sign ? -v : v;
}

// Nearest f16 by search over all non-negative finite values, ties to the even pattern;
// values at or past 65520 (65504 + half an ulp) round to inf.
uint16_t f32_to_f16_reference(float f) {
  static const std::vector<double> kValues = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h < 0x7C00; ++h) v.push_back(f16_reference(static_cast<uint16_t>(h)));
    v.push_back(65536.0);  // stands in for inf (pattern 0x7C00) in the tie logic
    return v;
  }();
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (std::isnan(f)) return 0x7E00;
  if (a >= 65536.0) return sign | 0x7C00;
  auto it = std::lower_bound(kValues.begin(), kValues.end(), a);
  uint16_t hi = static_cast<uint16_t>(it - kValues.begin());
  if (*it == a || hi == 0) return sign | hi;
  uint16_t lo = hi - 1;
  double dlo = a - kValues[lo], dhi = kValues[hi] - a;
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

TEST(DTypeTest, Names) {
  EXPECT_EQ(dtype_name(DType::kBF16), "BF16");
  EXPECT_EQ(dtype_from_name("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_FALSE(dtype_from_name("bf16").has_value());
}

TEST(DTypeTest, F16ToF32AllPatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    double want = f16_reference(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), want) << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    }
  }
}

TEST(DTypeTest, F16RoundTripAllPatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t back = f32_to_f16(f16_to_f32(static_cast<uint16_t>(h)));
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) {  // NaN: stays NaN with its sign
      EXPECT_EQ(back & 0x7C00, 0x7C00) << h;
      EXPECT_NE(back & 0x3FF, 0) << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << h;
    } else {
      EXPECT_EQ(back, h) << h;
    }
  }
}

TEST(DTypeTest, F32ToF16TrickyValues) {
  const float tricky[] = {0.0f,
                          -0.0f,
                          1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          65536.0f,
                          1e10f,
                          INFINITY,
                          -INFINITY,
                          std::ldexp(1.0f, -14),  // smallest normal
                          std::ldexp(1.0f, -24),  // smallest subnormal
                          std::ldexp(1.0f, -25),  // tie between 0 and the smallest subnormal: 0
                          std::ldexp(1.5f, -25),  // above the tie: smallest subnormal
                          std::ldexp(1.0f, -26),  // below half: 0
                          std::ldexp(3.0f, -25),  // tie between 1 and 2 subnormal units: 2 (even)
                          std::ldexp(5.0f, -25),  // tie between 2 and 3: 2
                          std::ldexp(1023.5f, -24),  // tie at the subnormal/normal boundary: 2^-14
                          std::ldexp(2047.5f, -25),  // just under 2^-14
                          1.0f + std::ldexp(1.0f, -11),  // tie: 1.0
                          1.0f + std::ldexp(3.0f, -11),  // tie: 1 + 2^-9
                          std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f),
                          2049.0f,
                          2051.0f,
                          4097.0f,
                          -3.14159f,
                          1e-8f,
                          -1e-7f,
                          6.1e-5f};
  for (float f : tricky)
    EXPECT_EQ(f32_to_f16(f), f32_to_f16_reference(f))
        << f << " bits 0x" << std::hex << f32_to_bits(f);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xFC00);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(f32_to_f16(std::nanf("")) & 0x7FFF, 0x7E00);
}

TEST(DTypeTest, F32ToF16AllMidpoints) {
  // Every exact midpoint between adjacent f16 values, and the f32 values just around it.
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    double lo = f16_reference(static_cast<uint16_t>(h));
    double hi = h + 1 == 0x7C00 ? 65536.0 : f16_reference(static_cast<uint16_t>(h + 1));
    float mid = static_cast<float>((lo + hi) / 2);  // exact in f32
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      ASSERT_EQ(f32_to_f16(f), f32_to_f16_reference(f)) << h << " " << f;
      ASSERT_EQ(f32_to_f16(-f), f32_to_f16_reference(-f)) << h << " " << -f;
    }
  }
}

TEST(DTypeTest, F32ToF16RandomPatterns) {
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    // Exponents concentrated on the f16 range and its edges.
    uint32_t u = (rng() & 0x807FFFFF) | ((96 + rng() % 56) << 23);
    if (i % 4 == 0) u = rng();
    float f = bits_to_f32(u);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), f32_to_f16_reference(f)) << std::hex << u;
  }
}

// bf16 reference: the nearer of the two truncation neighbours, ties to the even pattern.
uint16_t f32_to_bf16_reference(float f) {
  uint32_t u = f32_to_bits(f);
  uint32_t lo = u & 0xFFFF0000u;
  double a = std::fabs(static_cast<double>(f));
  double vlo = std::fabs(static_cast<double>(bits_to_f32(lo)));
  uint32_t hi_bits = lo + 0x10000;
  double vhi = (hi_bits & 0x7F800000u) == 0x7F800000u
                   ? std::ldexp(1.0, 128)
                   : std::fabs(static_cast<double>(bits_to_f32(hi_bits)));
  double dlo = a - vlo, dhi = vhi - a;
  if (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1) == 0)) return static_cast<uint16_t>(lo >> 16);
  return static_cast<uint16_t>(hi_bits >> 16);
}

TEST(DTypeTest, F32ToBf16) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F808000)), 0x3F80);  // tie to even (down)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F818000)), 0x3F82);  // tie to even (up)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F808001)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x7F7F8000)), 0x7F80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0xFF7FFFFF)), 0xFF80);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00008000)), 0x0000);  // subnormal tie
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00018000)), 0x0002);
  for (uint32_t nan : {0x7F800001u, 0x7FC00000u, 0xFFFFFFFFu, 0x7F80FFFFu}) {
    uint16_t b = f32_to_bf16(bits_to_f32(nan));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan;
  }
  std::mt19937 rng(13);
  for (int i = 0; i < 200000; ++i) {
    float f = bits_to_f32(rng());
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), f32_to_bf16_reference(f)) << std::hex << f32_to_bits(f);
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {  // bf16 -> f32 -> bf16 is the identity (non-NaN)
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
}

}  // namespace
}  // namespace tq
