#include "formats/mlx_encode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "formats/mlx_float.h"
#include "formats/mlx_quant.h"

namespace tq {
namespace {

constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr int kAffineBits[] = {1, 2, 3, 4, 5, 6, 8};
constexpr int kGroups[] = {32, 64, 128};

struct Encoded {
  std::vector<uint8_t> weight, scales, biases;
};

Encoded encode(const QuantSpec& spec, int64_t rows, int64_t cols, const std::vector<float>& w,
               DType dtype) {
  Encoded e;
  Status st = quantize_mlx(spec, rows, cols, w, dtype, &e.weight, &e.scales, &e.biases);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return e;
}

std::vector<float> decode(const QuantSpec& spec, int64_t rows, int64_t cols, const Encoded& e,
                          DType dtype) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  DType sd = spec.mode == QuantMode::kAffine ? dtype : DType::kU8;
  Status st = dequantize_mlx(spec, rows, cols, e.weight, sd, e.scales, e.biases, out);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return out;
}

float load_scalar(DType t, const std::vector<uint8_t>& b, size_t i) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, b.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, b.data() + 2 * i, 2);
  return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// Normal values scaled per row over several decades, rounded to dtype.
std::vector<float> random_matrix(std::mt19937& rng, int64_t rows, int64_t cols, DType dtype) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 9) - 6);
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = round_to_dtype(nd(rng) * scale, dtype);
  }
  return w;
}

// MLX's argmin over the E2M1 table, written out plainly.
uint8_t e2m1_reference(float x, DType dist_dtype) {
  static const float kTable[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                                   -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  int best = 0;
  for (int k = 1; k < 16; ++k)
    if (std::fabs(round_to_dtype(x - kTable[k], dist_dtype)) <
        std::fabs(round_to_dtype(x - kTable[best], dist_dtype)))
      best = k;
  return static_cast<uint8_t>(best);
}

TEST(MlxPackTest, PackCodesInvertsUnpackCodeForEveryWidth) {
  std::mt19937 rng(11);
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t n : {1u, 7u, 32u, 129u, 1000u}) {
      std::vector<uint8_t> codes(n);
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
      codes[0] = static_cast<uint8_t>((1u << bits) - 1);
      auto packed = pack_codes(codes, bits);
      ASSERT_EQ(packed.size(), (n * bits + 7) / 8);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(unpack_code(packed.data(), static_cast<int64_t>(i), bits), codes[i])
            << bits << " bits, code " << i;
      // Padding bits stay zero.
      if (n * bits % 8) {
        EXPECT_EQ(packed.back() >> (n * bits % 8), 0) << bits;
      }
    }
  }
}

TEST(MlxPackTest, PackCodesKnownLayoutsAndMasking) {
  std::vector<uint8_t> c4 = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(pack_codes(c4, 4), (std::vector<uint8_t>{0x10, 0x32, 0x54, 0x76}));
  std::vector<uint8_t> c3 = {0, 0, 7};  // code 2 = bits 6-7 of byte 0 + bit 0 of byte 1
  EXPECT_EQ(pack_codes(c3, 3), (std::vector<uint8_t>{0xC0, 0x01}));
  std::vector<uint8_t> high = {0xFF, 0xFF};  // masked to 2 bits
  EXPECT_EQ(pack_codes(high, 2), (std::vector<uint8_t>{0x0F}));
  EXPECT_TRUE(pack_codes(high, 0).empty());
  EXPECT_TRUE(pack_codes(high, 9).empty());
}

TEST(MlxAffineGridTest, LargerMagnitudeEndIsTheBias) {
  // min -1 is the edge: scale 1.5/15 = 0.1, q0 = -10, scale re-fit to -1/-10, bias -1.
  std::vector<float> g = {-1.0f, 0.5f, 0.0f, 0.25f};
  AffineGrid a = affine_grid(g, 4, DType::kF32);
  EXPECT_FLOAT_EQ(a.scale, 0.1f);
  EXPECT_EQ(a.bias, -1.0f);
  EXPECT_EQ(affine_code(-1.0f, a.scale, a.bias, 4), 0u);
  EXPECT_EQ(affine_code(0.0f, a.scale, a.bias, 4), 10u);
  EXPECT_EQ(affine_code(0.5f, a.scale, a.bias, 4), 15u);
  // max 2 is the edge: the scale is negative and code 0 decodes to 2.
  std::vector<float> h = {2.0f, -1.0f, 0.0f};
  AffineGrid b = affine_grid(h, 4, DType::kF32);
  EXPECT_FLOAT_EQ(b.scale, -0.2f);
  EXPECT_EQ(b.bias, 2.0f);
  EXPECT_EQ(affine_code(2.0f, b.scale, b.bias, 4), 0u);
  EXPECT_EQ(affine_code(0.0f, b.scale, b.bias, 4), 10u);
  EXPECT_EQ(affine_code(-1.0f, b.scale, b.bias, 4), 15u);
}

TEST(MlxAffineGridTest, CodesAreClampedRoundedToEvenAndNanIsZero) {
  // scale 1, bias 0: (w - b)/s ties round to even; out-of-range values clamp.
  EXPECT_EQ(affine_code(2.5f, 1.0f, 0.0f, 4), 2u);
  EXPECT_EQ(affine_code(3.5f, 1.0f, 0.0f, 4), 4u);
  EXPECT_EQ(affine_code(-3.0f, 1.0f, 0.0f, 4), 0u);
  EXPECT_EQ(affine_code(99.0f, 1.0f, 0.0f, 4), 15u);
  EXPECT_EQ(affine_code(254.5f, 1.0f, 0.0f, 8), 254u);
  EXPECT_EQ(affine_code(std::nanf(""), 1.0f, 0.0f, 8), 0u);
  EXPECT_EQ(affine_code(1.0f, 1.0f, 0.0f, 1), 1u);
}

TEST(MlxAffineGridTest, StoredPairIsRoundedToDtype) {
  std::vector<float> g = {round_to_dtype(-0.3f, DType::kBF16), 0.7f};
  g[1] = round_to_dtype(g[1], DType::kBF16);
  for (DType t : kFloatTypes) {
    AffineGrid a = affine_grid(g, 3, t);
    EXPECT_EQ(a.stored_scale, round_to_dtype(a.scale, t));
    EXPECT_EQ(a.stored_bias, round_to_dtype(a.bias, t));
  }
  AffineGrid f = affine_grid(g, 3, DType::kF32);
  EXPECT_EQ(f.stored_scale, f.scale);
}

TEST(MlxAffineEncodeTest, ZeroLandsOnCodeMinusQ0) {
  // Any group holding 0.0: its code is -q0 and it decodes to (almost) exactly 0; in f32 the
  // only error is the rounding of scale = edge/q0.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int bits : {2, 3, 4, 8}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> g(64);
      for (auto& v : g) v = nd(rng);
      g[17] = 0.0f;
      AffineGrid a = affine_grid(g, bits, DType::kF32);
      const float q0 = std::rint(a.bias / a.scale);
      const uint32_t q = affine_code(0.0f, a.scale, a.bias, bits);
      EXPECT_EQ(static_cast<float>(q), -q0);
      const float back = affine_dequant_value(a.stored_scale, q, a.stored_bias, DType::kF32);
      EXPECT_LE(std::fabs(back), std::fabs(a.bias) * 0x1p-22f) << bits << " " << trial;
    }
  }
}

TEST(MlxAffineEncodeTest, ZeroAndConstantGroupsDecodeExactly) {
  for (DType t : kFloatTypes) {
    for (int bits : kAffineBits) {
      const float c = round_to_dtype(-0.731f, t);
      std::vector<float> w(2 * 64, 0.0f);
      for (int i = 64; i < 128; ++i) w[i] = c;
      QuantSpec spec{QuantMode::kAffine, bits, 64};
      Encoded e = encode(spec, 2, 64, w, t);
      auto out = decode(spec, 2, 64, e, t);
      for (int i = 0; i < 64; ++i) ASSERT_EQ(out[i], 0.0f) << bits;
      for (int i = 64; i < 128; ++i) ASSERT_EQ(out[i], c) << bits;
      // all-zero group: scale -eps (bits > 1), bias 0
      EXPECT_EQ(load_scalar(t, e.biases, 0), 0.0f);
      EXPECT_EQ(load_scalar(t, e.scales, 0), round_to_dtype(bits == 1 ? 1e-7f : -1e-7f, t));
      EXPECT_EQ(load_scalar(t, e.biases, 1), c);
    }
  }
}

TEST(MlxAffineEncodeTest, OneBitUsesMinAndMax) {
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[i] = i % 3 == 0 ? -2.0f : (i % 3 == 1 ? 1.0f : -0.4f);
  QuantSpec spec{QuantMode::kAffine, 1, 32};
  Encoded e = encode(spec, 1, 32, w, DType::kF32);
  EXPECT_EQ(load_scalar(DType::kF32, e.scales, 0), 3.0f);
  EXPECT_EQ(load_scalar(DType::kF32, e.biases, 0), -2.0f);
  // -0.4 is 1.6/3 of the way up: code 1.
  for (int i = 0; i < 32; ++i) EXPECT_EQ(unpack_code(e.weight.data(), i, 1), i % 3 == 0 ? 0u : 1u);
}

TEST(MlxAffineEncodeTest, OneBitZeroBiasKeepsTheFirstZerosSign) {
  // MLX scans with std::min in order: the first of equal zeros wins (checked on mlx 0.32.4).
  for (float first : {0.0f, -0.0f}) {
    std::vector<float> w(64, 1.0f);
    w[3] = first;
    w[40] = -first;
    QuantSpec spec{QuantMode::kAffine, 1, 64};
    Encoded e = encode(spec, 1, 64, w, DType::kF32);
    EXPECT_EQ(f32_to_bits(load_scalar(DType::kF32, e.biases, 0)), f32_to_bits(first));
    EXPECT_EQ(f32_to_bits(affine_grid(w, 1, DType::kF32).bias), f32_to_bits(first));
  }
}

TEST(MlxAffineEncodeTest, RoundTripErrorIsHalfAStep) {
  std::mt19937 rng(5);
  const int64_t rows = 9, cols = 256;
  for (DType t : kFloatTypes) {
    const double eps = t == DType::kF32 ? 0x1p-23 : (t == DType::kF16 ? 0x1p-10 : 0x1p-7);
    for (int bits : kAffineBits) {
      for (int g : kGroups) {
        SCOPED_TRACE(testing::Message() << dtype_name(t) << " b" << bits << " g" << g);
        auto w = random_matrix(rng, rows, cols, t);
        QuantSpec spec{QuantMode::kAffine, bits, g};
        Encoded e = encode(spec, rows, cols, w, t);
        auto out = decode(spec, rows, cols, e, t);
        for (int64_t i = 0; i < rows * cols; ++i) {
          const size_t gi = static_cast<size_t>(i / g);
          const double s = std::fabs(load_scalar(t, e.scales, gi));
          const double b = std::fabs(load_scalar(t, e.biases, gi));
          // Half a step, plus what the grid leaves uncovered: q = 0 sits on the larger-magnitude
          // end and the re-fit scale can shrink, so n*s may fall short of the range. Plus the
          // scale/bias rounding and the dtype rounding of s*q + b.
          const double n = (1 << bits) - 1;
          auto [lo, hi] = std::minmax_element(w.begin() + gi * g, w.begin() + (gi + 1) * g);
          const double uncovered = std::max(0.0, double(*hi) - double(*lo) - n * s);
          const double bound = 0.5 * s + uncovered + 3 * eps * (n * s + b + std::fabs(w[i]));
          ASSERT_LE(std::fabs(out[i] - w[i]), bound) << "element " << i;
        }
      }
    }
  }
}

TEST(MlxAffineEncodeTest, PackedCodesMatchAffineCode) {
  std::mt19937 rng(9);
  for (int bits : kAffineBits) {
    auto w = random_matrix(rng, 3, 128, DType::kBF16);
    QuantSpec spec{QuantMode::kAffine, bits, 32};
    Encoded e = encode(spec, 3, 128, w, DType::kBF16);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t j = 0; j < 4; ++j) {
        std::span<const float> grp(w.data() + r * 128 + j * 32, 32);
        AffineGrid a = affine_grid(grp, bits, DType::kBF16);
        for (int i = 0; i < 32; ++i)
          ASSERT_EQ(unpack_code(e.weight.data() + r * 128 / 8 * bits, j * 32 + i, bits),
                    affine_code(grp[i], a.scale, a.bias, bits));
      }
  }
}

TEST(MlxFpEncodeTest, E4M3RoundTripsEveryCodeAndRoundsToEven) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN codes
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
  // Values mx.to_fp8 gives (mlx 0.32.4): saturation at 448, ties to even, subnormals.
  EXPECT_EQ(f32_to_e4m3(470.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::nanf("")), 0x7E);
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);
  EXPECT_EQ(f32_to_e4m3(0x1.8p-10f), 0x01);
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
}

TEST(MlxFpEncodeTest, E2M1MatchesTableArgminForEveryHalfValue) {
  // Every f16 and bf16 value (and random f32 ones) against MLX's plain argmin.
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float x = t == DType::kF16 ? f16_to_f32(static_cast<uint16_t>(h))
                                       : bf16_to_f32(static_cast<uint16_t>(h));
      for (QuantMode m : {QuantMode::kMxfp4, QuantMode::kNvfp4}) {
        const DType dist = m == QuantMode::kNvfp4 ? DType::kF32 : t;
        ASSERT_EQ(fp_code(m, x, 1.0f, t), e2m1_reference(x, dist)) << x;
      }
    }
  }
  std::mt19937 rng(2);
  for (int i = 0; i < 200000; ++i) {
    const float x = bits_to_f32(static_cast<uint32_t>(rng()));
    ASSERT_EQ(fp_code(QuantMode::kNvfp4, x, 1.0f, DType::kF32), e2m1_reference(x, DType::kF32))
        << x;
  }
  EXPECT_EQ(fp_code(QuantMode::kMxfp4, 0.75f, 1.0f, DType::kF32), 1);  // tie: smaller value
  EXPECT_EQ(fp_code(QuantMode::kMxfp4, -0.1f, 1.0f, DType::kF32), 0);  // never -0
  EXPECT_EQ(fp_code(QuantMode::kNvfp4, 1.0f, 0.0f, DType::kF32), 0);   // x = inf
}

TEST(MlxFpEncodeTest, MxScaleIsCeilLog2) {
  auto scale_of = [](QuantMode m, float amax, DType t) {
    std::vector<float> g(32, 0.0f);
    g[5] = -amax;
    return fp_group_scale(m, g, t);
  };
  for (int k : {-20, -1, 0, 3, 20}) {
    const float six = std::ldexp(6.0f, k);
    EXPECT_EQ(scale_of(QuantMode::kMxfp4, six, DType::kF32).byte, 127 + k);
    EXPECT_EQ(scale_of(QuantMode::kMxfp4, std::nextafter(six, 1e30f), DType::kF32).byte, 128 + k);
    EXPECT_EQ(scale_of(QuantMode::kMxfp4, std::ldexp(4.0f, k), DType::kF32).byte, 127 + k);
    EXPECT_EQ(scale_of(QuantMode::kMxfp8, std::ldexp(448.0f, k), DType::kF32).byte, 127 + k);
  }
  FpGroupScale z = scale_of(QuantMode::kMxfp8, 0.0f, DType::kBF16);
  EXPECT_EQ(z.byte, 127);
  EXPECT_EQ(z.divisor, 1.0f);
  // Below 2^-127 the exponent wraps around the byte, as in MLX.
  EXPECT_EQ(scale_of(QuantMode::kMxfp4, std::ldexp(6.0f, -128), DType::kF32).byte, 255);
  EXPECT_EQ(scale_of(QuantMode::kMxfp4, 1e-40f, DType::kF32).byte, 248);
  // bf16: amax/6 underflows to 0, so the scale is 1.
  EXPECT_EQ(scale_of(QuantMode::kMxfp4, 0x1p-133f, DType::kBF16).byte, 127);
}

TEST(MlxFpEncodeTest, RoundTripErrorBounds) {
  std::mt19937 rng(8);
  const int64_t rows = 9, cols = 256;
  for (DType t : kFloatTypes) {
    for (QuantMode m : {QuantMode::kMxfp4, QuantMode::kNvfp4, QuantMode::kMxfp8}) {
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " " << quant_mode_name(m));
      QuantSpec spec = default_spec_for_mode(m);
      auto w = random_matrix(rng, rows, cols, t);
      Encoded e = encode(spec, rows, cols, w, t);
      EXPECT_TRUE(e.biases.empty());
      auto out = decode(spec, rows, cols, e, t);
      const double maxval = spec.bits == 4 ? 6.0 : 448.0;
      for (int64_t i = 0; i < rows * cols; ++i) {
        const int64_t gi = i / spec.group_size;
        const uint8_t sb = e.scales[static_cast<size_t>(gi)];
        const double d = m == QuantMode::kNvfp4 ? e4m3_to_f32(sb) : e8m0_to_f32(sb);
        double amax = 0;
        for (int k = 0; k < spec.group_size; ++k)
          amax = std::max(amax, std::fabs(double(w[gi * spec.group_size + k])));
        // E2M1 steps are at most 2 (between 4 and 6): half a step is 1 unit of the scale;
        // E4M3 is relative 2^-4 plus half its subnormal step. nvfp4 rounds the scale to E4M3,
        // so elements can exceed maxval and saturate. The output is rounded to bf16.
        const double elem = spec.bits == 4 ? 1.0 : std::fabs(w[i]) / d * 0x1p-4 + 0x1p-10;
        const double sat = std::max(0.0, amax / d - maxval);
        ASSERT_LE(std::fabs(out[i] - w[i]), d * (elem + sat) + std::fabs(w[i]) * 0x1p-8)
            << "element " << i;
      }
    }
  }
}

// quantize_mlx's vectorized loops against the per-group functions, on every finite f16 and
// bf16 value (and random f32 ones) under group maxima that put them on every scale.
TEST(MlxFpEncodeTest, MatrixLoopsMatchPerGroupFunctions) {
  std::mt19937 rng(4);
  for (DType t : kFloatTypes) {
    std::vector<float> vals;
    for (uint32_t h = 0; h < 0x10000; ++h) {
      float v = t == DType::kF16 ? f16_to_f32(static_cast<uint16_t>(h))
                                 : bf16_to_f32(static_cast<uint16_t>(h));
      if (t == DType::kF32) v = bits_to_f32(static_cast<uint32_t>(rng()));
      if (std::isfinite(v)) vals.push_back(v);
    }
    // Half in random groups, half sorted by magnitude so groups sit on every scale.
    std::shuffle(vals.begin(), vals.end(), rng);
    std::sort(vals.begin(), vals.begin() + vals.size() / 2,
              [](float a, float b) { return std::fabs(a) < std::fabs(b); });
    vals.resize(vals.size() / 32 * 32);
    const int64_t cols = 256, rows = static_cast<int64_t>(vals.size()) / cols;
    vals.resize(static_cast<size_t>(rows * cols));
    for (QuantMode m : {QuantMode::kMxfp4, QuantMode::kNvfp4, QuantMode::kMxfp8}) {
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " " << quant_mode_name(m));
      const QuantSpec spec = default_spec_for_mode(m);
      Encoded e = encode(spec, rows, cols, vals, t);
      const int g = spec.group_size;
      for (int64_t gi = 0; gi < rows * cols / g; ++gi) {
        std::span<const float> grp(vals.data() + gi * g, static_cast<size_t>(g));
        const FpGroupScale sc = fp_group_scale(m, grp, t);
        ASSERT_EQ(e.scales[static_cast<size_t>(gi)], sc.byte) << "group " << gi;
        for (int i = 0; i < g; ++i)
          ASSERT_EQ(unpack_code(e.weight.data(), gi * g + i, spec.bits),
                    fp_code(m, grp[i], sc.divisor, t))
              << "group " << gi << " value " << grp[i];
      }
    }
  }
}

TEST(MlxEncodeTest, RejectsBadInput) {
  std::vector<uint8_t> wq, s, b;
  std::vector<float> w(2 * 64, 0.5f);
  const QuantSpec a4{QuantMode::kAffine, 4, 64};
  auto fails = [&](const QuantSpec& spec, int64_t r, int64_t c, std::span<const float> v, DType t,
                   const char* needle) {
    Status st = quantize_mlx(spec, r, c, v, t, &wq, &s, &b);
    ASSERT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.error().message.find(needle), std::string::npos) << st.error().message;
  };
  fails(QuantSpec{QuantMode::kAffine, 7, 64}, 2, 64, w, DType::kF32, "bits");
  fails(QuantSpec{QuantMode::kNvfp4, 4, 32}, 2, 64, w, DType::kF32, "nvfp4");
  fails(a4, 4, 32, w, DType::kF32, "multiple of the group size");
  fails(a4, 2, 64, std::span<const float>(w).first(100), DType::kF32, "100 values");
  fails(a4, -2, 64, w, DType::kF32, "negative");
  fails(a4, INT64_MAX / 64, 128, w, DType::kF32, "too large");
  fails(a4, 2, 64, w, DType::kF64, "dtype");
  fails(a4, 2, 64, w, DType::kU8, "dtype");
  auto bad = w;
  bad[70] = std::nanf("");
  fails(a4, 2, 64, bad, DType::kF32, "weight [1, 6] is nan");
  bad[70] = -std::numeric_limits<float>::infinity();
  fails(QuantSpec{QuantMode::kMxfp4, 4, 32}, 2, 64, bad, DType::kBF16, "is -inf");
  bad[70] = 0.1f;  // not a bf16 or f16 value
  fails(a4, 2, 64, bad, DType::kBF16, "not a BF16 value");
  fails(a4, 2, 64, bad, DType::kF16, "not a F16 value");
  EXPECT_TRUE(quantize_mlx(a4, 2, 64, bad, DType::kF32, &wq, &s, &b).ok());
  EXPECT_FALSE(quantize_mlx(a4, 2, 64, w, DType::kF32, nullptr, &s, &b).ok());
}

TEST(MlxEncodeTest, EmptyMatrixAndOutputSizes) {
  std::vector<uint8_t> wq = {1}, s = {1}, b = {1};
  ASSERT_TRUE(quantize_mlx(QuantSpec{}, 0, 64, {}, DType::kBF16, &wq, &s, &b).ok());
  EXPECT_TRUE(wq.empty() && s.empty() && b.empty());
  std::vector<float> w(3 * 96, 1.0f);
  ASSERT_TRUE(
      quantize_mlx(QuantSpec{QuantMode::kAffine, 3, 32}, 3, 96, w, DType::kF16, &wq, &s, &b).ok());
  EXPECT_EQ(wq.size(), 3u * 96 * 3 / 8);
  EXPECT_EQ(s.size(), 3u * 3 * 2);
  EXPECT_EQ(b.size(), s.size());
  b = {1, 2};
  ASSERT_TRUE(
      quantize_mlx(QuantSpec{QuantMode::kMxfp8, 8, 32}, 3, 96, w, DType::kF32, &wq, &s, &b).ok());
  EXPECT_EQ(wq.size(), 3u * 96);
  EXPECT_EQ(s.size(), 9u);
  EXPECT_TRUE(b.empty());
}

// Property: any finite values of any dtype encode without error under every spec, and affine
// groups whose range fits the dtype decode to finite values.
TEST(MlxEncodeTest, RandomBitPatternsEncodeAndDecode) {
  std::mt19937 rng(13);
  std::vector<QuantSpec> specs = {
      {QuantMode::kMxfp4, 4, 32}, {QuantMode::kNvfp4, 4, 16}, {QuantMode::kMxfp8, 8, 32}};
  for (int bits : kAffineBits)
    for (int g : kGroups) specs.push_back({QuantMode::kAffine, bits, g});
  for (DType t : kFloatTypes) {
    // Keep max - min (the 1-bit scale) finite in the dtype.
    const float limit = t == DType::kF16 ? 30000.0f : 1e30f;
    std::vector<float> w(4 * 128);
    for (auto& v : w) {
      do {
        uint32_t u = static_cast<uint32_t>(rng());
        v = t == DType::kF32 ? bits_to_f32(u)
                             : (t == DType::kF16 ? f16_to_f32(static_cast<uint16_t>(u))
                                                 : bf16_to_f32(static_cast<uint16_t>(u)));
      } while (!std::isfinite(v) || std::fabs(v) > limit);
    }
    for (const QuantSpec& spec : specs) {
      Encoded e = encode(spec, 4, 128, w, t);
      auto out = decode(spec, 4, 128, e, t);
      for (size_t i = 0; i < out.size(); ++i)
        if (spec.mode == QuantMode::kAffine) {
          ASSERT_TRUE(std::isfinite(out[i])) << i;
        }
    }
  }
}

}  // namespace
}  // namespace tq
