#include "formats/mlx_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tq {
namespace {

// Reference packer: code i goes to stream bits [i*b, (i+1)*b), LSB first, one bit at a time.
std::vector<uint8_t> pack_reference(const std::vector<uint32_t>& codes, int bits) {
  std::vector<uint8_t> out((codes.size() * bits + 31) / 32 * 4, 0);
  for (size_t i = 0; i < codes.size(); ++i)
    for (int k = 0; k < bits; ++k) {
      size_t bit = i * bits + k;
      if ((codes[i] >> k) & 1) out[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
    }
  return out;
}

std::vector<uint8_t> words_le(std::initializer_list<uint32_t> words) {
  std::vector<uint8_t> out;
  for (uint32_t w : words)
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<uint8_t>(w >> (8 * k)));
  return out;
}

TEST(MlxBitstreamTest, RoundTripsEveryWidth) {
  std::mt19937 rng(7);
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t n : {32u, 96u, 256u, 1000u}) {
      std::vector<uint32_t> codes(n);
      for (auto& c : codes) c = rng() & ((1u << bits) - 1);
      codes[0] = (1u << bits) - 1;  // all ones at the start and end
      codes.back() = (1u << bits) - 1;
      auto packed = pack_reference(codes, bits);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(unpack_code(packed.data(), i, bits), codes[i]) << bits << " bits, code " << i;
    }
  }
}

TEST(MlxBitstreamTest, FourBitCodesFillWordsFromTheLowBits) {
  auto w = words_le({0x76543210u, 0xFEDCBA98u});
  for (int i = 0; i < 16; ++i) EXPECT_EQ(unpack_code(w.data(), i, 4), static_cast<uint32_t>(i));
  auto w2 = words_le({0xE4E4E4E4u});  // 2-bit codes 0,1,2,3 repeating
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(unpack_code(w2.data(), i, 2), static_cast<uint32_t>(i % 4));
}

TEST(MlxBitstreamTest, ThreeBitCodesStraddleBytesAndWords) {
  // Code 2 of a 3-bit stream is bits 6-7 of byte 0 plus bit 0 of byte 1.
  std::vector<uint8_t> b = {0xC0, 0x01, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(unpack_code(b.data(), 2, 3), 7u);
  EXPECT_EQ(unpack_code(b.data(), 1, 3), 0u);
  EXPECT_EQ(unpack_code(b.data(), 3, 3), 0u);
  // Code 10 is bits 30-31 of word 0 plus bit 0 of word 1.
  auto w = words_le({0x80000000u, 0x00000001u});
  EXPECT_EQ(unpack_code(w.data(), 10, 3), 6u);
  w = words_le({0x40000000u, 0x00000000u});
  EXPECT_EQ(unpack_code(w.data(), 10, 3), 1u);
  // 6-bit: code 1 is bits 6..11 = byte 0 bits 6-7 and byte 1 bits 0-3.
  std::vector<uint8_t> c = {0x40, 0x0F, 0, 0};
  EXPECT_EQ(unpack_code(c.data(), 1, 6), 0x3Du);
  // 5-bit: code 6 is bits 30..34, across the word boundary.
  auto v = words_le({0xC0000000u, 0x00000005u});
  EXPECT_EQ(unpack_code(v.data(), 6, 5), 0x17u);
}

TEST(MlxElementTest, E2M1Table) {
  const float want[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_to_f32(c), want[c]);
    EXPECT_EQ(e2m1_to_f32(c | 8), -want[c]);
  }
  EXPECT_TRUE(std::signbit(e2m1_to_f32(8)));
  EXPECT_EQ(e2m1_to_f32(0xF7), 6.0f);  // only the low nibble counts
}

TEST(MlxElementTest, E4M3KnownValues) {
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x3C), 1.5f);
  EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
  EXPECT_EQ(e4m3_to_f32(0x80), 0.0f);
  // mlx 0.32 CPU decodes the NaN codes as NaN (Metal would give 480).
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
}

TEST(MlxElementTest, E4M3MatchesFormulaForEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    int e = (c >> 3) & 0xF, m = c & 7;
    double v = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
    EXPECT_EQ(e4m3_to_f32(c), static_cast<float>(c & 0x80 ? -v : v)) << c;
  }
}

TEST(MlxElementTest, E8M0Values) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(120), 1.0f / 128);
  EXPECT_EQ(e8m0_to_f32(1), std::ldexp(1.0f, -126));
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));  // subnormal, not zero
  EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isinf(e8m0_to_f32(255)));
  for (int e = 1; e < 255; ++e) EXPECT_EQ(e8m0_to_f32(e), std::ldexp(1.0f, e - 127)) << e;
}

std::vector<uint8_t> f32_bytes(std::initializer_list<float> v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

std::vector<uint8_t> u16_bytes(std::initializer_list<uint16_t> v) {
  std::vector<uint8_t> out(v.size() * 2);
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

TEST(MlxDequantTest, AffineF32ScaleAndBias) {
  // One row, 64 columns, 4-bit, g32: group 0 codes 0..15 twice, group 1 all 15.
  std::vector<uint8_t> w = words_le({0x76543210u, 0xFEDCBA98u, 0x76543210u, 0xFEDCBA98u,
                                     0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu});
  auto scales = f32_bytes({0.5f, -0.25f});
  auto biases = f32_bytes({-1.0f, 3.0f});
  std::vector<float> out(64);
  ASSERT_TRUE(
      dequantize_mlx({QuantMode::kAffine, 4, 32}, 1, 64, w, DType::kF32, scales, biases, out).ok());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * (i % 16) - 1.0f) << i;
  for (int i = 32; i < 64; ++i) EXPECT_EQ(out[i], -0.25f * 15 + 3.0f) << i;
}

TEST(MlxDequantTest, AffineBf16RoundsProductThenSum) {
  // s = 1+2^-7, q = 3: s*q = 3.0234375 is a bf16 tie and rounds to 3.03125 before -3 is added,
  // so MLX gives 0.03125 where one rounding of s*q+b would give 0.0234375.
  std::vector<uint8_t> w = words_le({0x33333333u, 0x33333333u, 0x33333333u, 0x33333333u});
  auto scales = u16_bytes({0x3F81});
  auto biases = u16_bytes({0xC040});  // -3
  std::vector<float> out(32);
  ASSERT_TRUE(
      dequantize_mlx({QuantMode::kAffine, 4, 32}, 1, 32, w, DType::kBF16, scales, biases, out)
          .ok());
  for (float v : out) EXPECT_EQ(v, 0.03125f);
}

TEST(MlxDequantTest, AffineF16RoundsProductThenSum) {
  // s = 1+2^-10, q = 3: s*q rounds (tie to even) to 3 + 2^-8 in f16, then -3 leaves 2^-8.
  std::vector<uint8_t> w = words_le({0x33333333u, 0x33333333u, 0x33333333u, 0x33333333u});
  auto scales = u16_bytes({0x3C01});
  auto biases = u16_bytes({0xC200});  // -3
  std::vector<float> out(32);
  ASSERT_TRUE(
      dequantize_mlx({QuantMode::kAffine, 4, 32}, 1, 32, w, DType::kF16, scales, biases, out).ok());
  for (float v : out) EXPECT_EQ(v, 0.00390625f);
  // Overflow of s*q in f16 gives inf, as MLX's f16 arithmetic does.
  auto big = u16_bytes({0x7BFF});  // 65504
  auto zero = u16_bytes({0x0000});
  ASSERT_TRUE(
      dequantize_mlx({QuantMode::kAffine, 4, 32}, 1, 32, w, DType::kF16, big, zero, out).ok());
  EXPECT_TRUE(std::isinf(out[0]));
}

// Random finite f16/bf16 scales and biases (all exponents, subnormals, overflow of s*q):
// the decoder's rounding must equal the dtype.cc conversions applied twice.
TEST(MlxDequantTest, HalfRoundingMatchesDtypeConversions) {
  std::mt19937 rng(17);
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (int bits : {2, 4, 8}) {  // 2 and 4 bits take the per-group table, 8 bits does not
      const int64_t rows = 64, cols = 128, g = 32;
      std::vector<uint32_t> codes(rows * cols);
      for (auto& c : codes) c = rng() & ((1u << bits) - 1);
      auto w = pack_reference(codes, bits);
      std::vector<uint16_t> s(rows * cols / g), b(rows * cols / g);
      const uint16_t exp_mask = dt == DType::kF16 ? 0x7C00 : 0x7F80;
      for (auto* v : {&s, &b})
        for (auto& h : *v) {
          do h = static_cast<uint16_t>(rng());
          while ((h & exp_mask) == exp_mask);  // finite only
        }
      std::vector<uint8_t> sb(s.size() * 2), bb(b.size() * 2);
      std::memcpy(sb.data(), s.data(), sb.size());
      std::memcpy(bb.data(), b.data(), bb.size());
      std::vector<float> out(rows * cols);
      ASSERT_TRUE(dequantize_mlx({QuantMode::kAffine, bits, static_cast<int>(g)}, rows, cols, w, dt,
                                 sb, bb, out)
                      .ok());
      auto widen = [&](uint16_t h) { return dt == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h); };
      auto round = [&](float x) {
        return dt == DType::kF16 ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
      };
      for (int64_t i = 0; i < rows * cols; ++i) {
        float sv = widen(s[i / g]), bv = widen(b[i / g]);
        float want = round(round(sv * static_cast<float>(codes[i])) + bv);
        ASSERT_EQ(f32_to_bits(out[i]), f32_to_bits(want))
            << dtype_name(dt) << " " << bits << " bits, element " << i << ": s " << sv << " q "
            << codes[i] << " b " << bv;
      }
    }
  }
}

TEST(MlxDequantTest, ThreeBitRowsAcrossWords) {
  // Two rows of 32 three-bit codes (3 words each); code i of row r is (i + r) % 8.
  std::vector<uint32_t> codes;
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 32; ++i) codes.push_back((i + r) % 8);
  auto w = pack_reference(codes, 3);
  ASSERT_EQ(w.size(), 24u);
  auto scales = f32_bytes({1.0f, 2.0f});
  auto biases = f32_bytes({0.0f, 0.5f});
  std::vector<float> out(64);
  ASSERT_TRUE(
      dequantize_mlx({QuantMode::kAffine, 3, 32}, 2, 32, w, DType::kF32, scales, biases, out).ok());
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(out[i], static_cast<float>(i % 8));
    EXPECT_EQ(out[32 + i], 2.0f * ((i + 1) % 8) + 0.5f);
  }
}

TEST(MlxDequantTest, Mxfp4AndNvfp4) {
  std::vector<uint8_t> w = words_le({0x76543210u, 0xFEDCBA98u, 0x76543210u, 0xFEDCBA98u});
  std::vector<uint8_t> e8 = {128};  // 2.0
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize_mlx({QuantMode::kMxfp4, 4, 32}, 1, 32, w, DType::kU8, e8, {}, out).ok());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 2.0f * e2m1_to_f32(i % 16)) << i;

  std::vector<uint8_t> e4 = {0x30, 0x7E};  // 0.5 and 448
  ASSERT_TRUE(
      dequantize_mlx({QuantMode::kNvfp4, 4, 16}, 1, 32, w, DType::kF8E4M3, e4, {}, out).ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], 0.5f * e2m1_to_f32(i)) << i;
  for (int i = 16; i < 32; ++i) EXPECT_EQ(out[i], 448.0f * e2m1_to_f32(i - 16)) << i;
}

TEST(MlxDequantTest, Mxfp8RoundsToBf16) {
  // Scale 2^-127 (E=0) times 2^-9 is 2^-136, below bf16's smallest subnormal 2^-133: 0.
  std::vector<uint8_t> w(32, 0x01);
  w[1] = 0x7E;  // 448 * 2^-127 stays representable
  w[2] = 0x80;  // -0
  std::vector<uint8_t> s = {0};
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize_mlx({QuantMode::kMxfp8, 8, 32}, 1, 32, w, DType::kU8, s, {}, out).ok());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 448.0f * std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::signbit(out[2]));
  s[0] = 127;
  w[3] = 0x7F;
  ASSERT_TRUE(dequantize_mlx({QuantMode::kMxfp8, 8, 32}, 1, 32, w, DType::kU8, s, {}, out).ok());
  EXPECT_EQ(out[0], std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(out[3]));
}

TEST(MlxDequantTest, RejectsBadInput) {
  const QuantSpec a4{QuantMode::kAffine, 4, 32};
  std::vector<uint8_t> w(16 * 2), s4(4 * 2), b4(4 * 2), s1(2);
  std::vector<float> out(64);
  auto run = [&](const QuantSpec& spec, int64_t rows, int64_t cols, std::span<const uint8_t> wt,
                 DType sd, std::span<const uint8_t> sc, std::span<const uint8_t> bi,
                 std::span<float> o) {
    Status st = dequantize_mlx(spec, rows, cols, wt, sd, sc, bi, o);
    return st.ok() ? std::string("ok") : st.error().message;
  };
  // 2 rows x 32 cols, 4-bit: 32 weight bytes, 2 scales of F32 = 8 bytes.
  std::span<float> o64(out.data(), 64);
  EXPECT_EQ(run(a4, 2, 32, w, DType::kF32, s4, b4, o64), "ok");
  EXPECT_NE(run(a4, 2, 32, std::span(w).first(31), DType::kF32, s4, b4, o64), "ok");
  EXPECT_EQ(run(a4, 2, 32, std::span(w).first(31), DType::kF32, s4, b4, o64),
            "affine 4-bit g32: weight has 31 bytes, expected 32 for shape [2, 32]");
  std::vector<uint8_t> w_long(33);
  EXPECT_NE(run(a4, 2, 32, w_long, DType::kF32, s4, b4, o64), "ok");
  EXPECT_NE(run(a4, 2, 32, w, DType::kF32, std::span(s4).first(7), b4, o64), "ok");
  EXPECT_NE(run(a4, 2, 32, w, DType::kF32, s4, {}, o64), "ok");            // biases missing
  EXPECT_NE(run(a4, 2, 32, w, DType::kBF16, s4, b4, o64), "ok");           // scale bytes wrong
  EXPECT_NE(run(a4, 2, 32, w, DType::kU8, s4, b4, o64), "ok");             // not a float dtype
  EXPECT_NE(run(a4, 2, 32, w, DType::kF32, s4, b4, o64.first(63)), "ok");  // output too short
  EXPECT_NE(run({QuantMode::kAffine, 7, 32}, 2, 32, w, DType::kF32, s4, b4, o64), "ok");
  EXPECT_NE(run({QuantMode::kAffine, 4, 64}, 1, 96, w, DType::kF32, s4, b4, o64), "ok");
  EXPECT_NE(run(a4, -1, 32, w, DType::kF32, s4, b4, o64), "ok");
  // Sizes whose byte counts overflow int64 are errors, not crashes.
  const int64_t huge = std::numeric_limits<int64_t>::max() / 64 * 32;
  EXPECT_NE(run(a4, huge, huge, w, DType::kF32, s4, b4, o64), "ok");
  EXPECT_NE(run(a4, 1, huge, w, DType::kF32, s4, b4, o64), "ok");
  // fp modes: no biases, one U8 scale per group.
  const QuantSpec mx4{QuantMode::kMxfp4, 4, 32};
  EXPECT_EQ(run(mx4, 2, 32, w, DType::kU8, s1, {}, o64), "ok");
  EXPECT_EQ(run(mx4, 2, 32, w, DType::kU8, s1, s1, o64),
            "mxfp4: mode has no biases but some were given");
  EXPECT_NE(run(mx4, 2, 32, w, DType::kF32, s1, {}, o64), "ok");
  EXPECT_NE(run(mx4, 2, 32, w, DType::kF8E4M3, s1, {}, o64), "ok");  // E4M3 is nvfp4's
  EXPECT_NE(run(mx4, 2, 32, w, DType::kU8, std::span(s1).first(1), {}, o64), "ok");
}

TEST(MlxDequantTest, EmptyMatrix) {
  std::vector<float> out;
  EXPECT_TRUE(
      dequantize_mlx({QuantMode::kAffine, 4, 64}, 0, 128, {}, DType::kBF16, {}, {}, out).ok());
}

}  // namespace
}  // namespace tq
