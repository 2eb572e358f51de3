#include "formats/ggml_blocks.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace tq {
namespace {

TEST(GgmlTypeTest, BlockSizes) {
  struct Want {
    GgmlType t;
    const char* name;
    int64_t elems, bytes;
  };
  const Want want[] = {
      {GgmlType::kF32, "F32", 1, 4},       {GgmlType::kF16, "F16", 1, 2},
      {GgmlType::kBF16, "BF16", 1, 2},     {GgmlType::kQ4_0, "Q4_0", 32, 18},
      {GgmlType::kQ4_1, "Q4_1", 32, 20},   {GgmlType::kQ5_0, "Q5_0", 32, 22},
      {GgmlType::kQ5_1, "Q5_1", 32, 24},   {GgmlType::kQ8_0, "Q8_0", 32, 34},
      {GgmlType::kQ2_K, "Q2_K", 256, 84},  {GgmlType::kQ3_K, "Q3_K", 256, 110},
      {GgmlType::kQ4_K, "Q4_K", 256, 144}, {GgmlType::kQ5_K, "Q5_K", 256, 176},
      {GgmlType::kQ6_K, "Q6_K", 256, 210},
  };
  for (const Want& w : want) {
    auto info = ggml_type_info(static_cast<uint32_t>(w.t));
    ASSERT_TRUE(info.has_value()) << w.name;
    EXPECT_EQ(info->name, w.name);
    EXPECT_EQ(info->block_elems, w.elems) << w.name;
    EXPECT_EQ(info->block_bytes, w.bytes) << w.name;
    EXPECT_TRUE(info->can_dequantize) << w.name;
  }
}

TEST(GgmlTypeTest, KnownButUndecodableTypes) {
  for (GgmlType t :
       {GgmlType::kQ8_1, GgmlType::kQ8_K, GgmlType::kIQ2_XXS, GgmlType::kIQ4_XS, GgmlType::kIQ1_M,
        GgmlType::kTQ1_0, GgmlType::kTQ2_0, GgmlType::kI8, GgmlType::kF64, GgmlType::kNVFP4}) {
    auto info = ggml_type_info(static_cast<uint32_t>(t));
    ASSERT_TRUE(info.has_value()) << static_cast<int>(t);
    EXPECT_FALSE(info->can_dequantize) << info->name;
  }
  EXPECT_EQ(ggml_type_info(16)->name, "IQ2_XXS");
  EXPECT_EQ(ggml_type_info(15)->block_bytes, 292);
  EXPECT_EQ(ggml_type_info(9)->block_bytes, 36);
  for (uint32_t id : {4u, 5u, 31u, 36u, 42u, 1000u, 0xFFFFFFFFu})
    EXPECT_FALSE(ggml_type_info(id).has_value()) << id;
}

TEST(GgmlTypeTest, RowBytes) {
  auto q4k = *ggml_type_info(12);
  EXPECT_EQ(ggml_row_bytes(q4k, 0), 0);
  EXPECT_EQ(ggml_row_bytes(q4k, 512), 288);
  EXPECT_EQ(ggml_row_bytes(q4k, 100), -1);
  EXPECT_EQ(ggml_row_bytes(q4k, -256), -1);
  EXPECT_EQ(ggml_row_bytes(*ggml_type_info(0), 10), 40);
  EXPECT_EQ(ggml_row_bytes(*ggml_type_info(0), INT64_MAX / 2), -1);  // overflow
}

void put_f16(uint8_t* p, float v) {
  uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

std::vector<float> decode(GgmlType t, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(n);
  Status st = dequantize_ggml(static_cast<uint32_t>(t), bytes, n, out);
  EXPECT_TRUE(st.ok()) << st.error().message;
  return out;
}

TEST(GgmlDequantTest, PlainFloats) {
  std::vector<uint8_t> f16 = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00};  // 1, -2, 2^-24
  auto y = decode(GgmlType::kF16, f16, 3);
  EXPECT_EQ(y, (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24)}));
  std::vector<uint8_t> bf16 = {0x80, 0x3F, 0x49, 0x40};  // 1, 3.140625
  EXPECT_EQ(decode(GgmlType::kBF16, bf16, 2), (std::vector<float>{1.0f, 3.140625f}));
  std::vector<uint8_t> f32(8);
  float v[2] = {1.5f, -7.25f};
  std::memcpy(f32.data(), v, 8);
  EXPECT_EQ(decode(GgmlType::kF32, f32, 2), (std::vector<float>{1.5f, -7.25f}));
}

TEST(GgmlDequantTest, Q8_0) {
  std::vector<uint8_t> b(34);
  put_f16(b.data(), 0.5f);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  auto y = decode(GgmlType::kQ8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * (j * 8 - 128)) << j;
}

TEST(GgmlDequantTest, Q4_0AndQ4_1) {
  std::vector<uint8_t> b(18);
  put_f16(b.data(), 2.0f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  auto y = decode(GgmlType::kQ4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * (j - 8)) << j;
    EXPECT_EQ(y[16 + j], 2.0f * (15 - j - 8)) << j;
  }
  std::vector<uint8_t> c(20);
  put_f16(c.data(), 0.25f);
  put_f16(c.data() + 2, -1.0f);
  for (int j = 0; j < 16; ++j) c[4 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  y = decode(GgmlType::kQ4_1, c, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * j - 1.0f) << j;
    EXPECT_EQ(y[16 + j], 0.25f * (15 - j) - 1.0f) << j;
  }
}

TEST(GgmlDequantTest, Q5_0AndQ5_1) {
  // Element j has code 31 - j: low nibble in qs, fifth bit in the little-endian qh word.
  auto fill = [](uint8_t* qh, uint8_t* qs) {
    uint32_t h = 0;
    for (int j = 0; j < 32; ++j) {
      int q = 31 - j;
      if (q & 16) h |= 1u << j;
      if (j < 16)
        qs[j] = static_cast<uint8_t>(q & 15);
      else
        qs[j - 16] |= static_cast<uint8_t>((q & 15) << 4);
    }
    std::memcpy(qh, &h, 4);
  };
  std::vector<uint8_t> b(22, 0);
  put_f16(b.data(), 1.0f);
  fill(b.data() + 2, b.data() + 6);
  auto y = decode(GgmlType::kQ5_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], static_cast<float>(31 - j - 16)) << j;
  std::vector<uint8_t> c(24, 0);
  put_f16(c.data(), 0.5f);
  put_f16(c.data() + 2, 3.0f);
  fill(c.data() + 4, c.data() + 8);
  y = decode(GgmlType::kQ5_1, c, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * (31 - j) + 3.0f) << j;
}

// Reference encoders of the k-quant layouts (llama.cpp block_q*_K), written from the layout
// description, so the decoders are checked against an independent packing.
struct KBlock {
  std::vector<int> q;       // 256 codes
  std::vector<int> sc, mn;  // per sub-block scale and min
};

void pack_scale_min_k4(uint8_t* s, const std::vector<int>& sc, const std::vector<int>& mn) {
  for (int i = 0; i < 4; ++i) {
    s[i] = static_cast<uint8_t>((sc[i] & 63) | (sc[i + 4] >> 4) << 6);
    s[i + 4] = static_cast<uint8_t>((mn[i] & 63) | (mn[i + 4] >> 4) << 6);
    s[i + 8] = static_cast<uint8_t>((sc[i + 4] & 15) | (mn[i + 4] & 15) << 4);
  }
}

TEST(GgmlDequantTest, Q4_KAndQ5_K) {
  std::mt19937 rng(3);
  KBlock k{std::vector<int>(256), std::vector<int>(8), std::vector<int>(8)};
  for (int i = 0; i < 8; ++i) {
    k.sc[i] = static_cast<int>(rng() % 64);
    k.mn[i] = static_cast<int>(rng() % 64);
  }
  for (int e = 0; e < 256; ++e) k.q[e] = static_cast<int>(rng() % 32);

  std::vector<uint8_t> b4(144, 0), b5(176, 0);
  for (auto* b : {&b4, &b5}) {
    put_f16(b->data(), 0.5f);
    put_f16(b->data() + 2, 0.25f);
    pack_scale_min_k4(b->data() + 4, k.sc, k.mn);
  }
  for (int e = 0; e < 256; ++e) {
    int i = e / 32, l = e % 32;  // sub-block i: nibble i%2 of bytes 32*(i/2) + l
    b4[16 + 32 * (i / 2) + l] |= static_cast<uint8_t>((k.q[e] & 15) << (4 * (i % 2)));
    b5[48 + 32 * (i / 2) + l] |= static_cast<uint8_t>((k.q[e] & 15) << (4 * (i % 2)));
    b5[16 + l] |= static_cast<uint8_t>(((k.q[e] >> 4) & 1) << i);
  }
  auto y4 = decode(GgmlType::kQ4_K, b4, 256);
  auto y5 = decode(GgmlType::kQ5_K, b5, 256);
  for (int e = 0; e < 256; ++e) {
    int i = e / 32;
    EXPECT_EQ(y4[e], 0.5f * k.sc[i] * (k.q[e] & 15) - 0.25f * k.mn[i]) << e;
    EXPECT_EQ(y5[e], 0.5f * k.sc[i] * k.q[e] - 0.25f * k.mn[i]) << e;
  }
}

TEST(GgmlDequantTest, Q2_KAndQ3_K) {
  std::mt19937 rng(5);
  std::vector<int> q(256), sc(16), mn(16);
  for (auto& v : q) v = static_cast<int>(rng() % 8);  // 3-bit for Q3_K, low 2 bits for Q2_K
  for (int i = 0; i < 16; ++i) {
    sc[i] = static_cast<int>(rng() % 64);
    mn[i] = static_cast<int>(rng() % 16);
  }
  // Q2_K: scales[16] (scale | min<<4), qs[64], d, dmin.
  std::vector<uint8_t> b2(84, 0);
  for (int i = 0; i < 16; ++i) b2[i] = static_cast<uint8_t>((sc[i] & 15) | mn[i] << 4);
  for (int e = 0; e < 256; ++e)
    b2[16 + (e / 128) * 32 + e % 32] |= static_cast<uint8_t>((q[e] & 3) << (2 * ((e % 128) / 32)));
  put_f16(b2.data() + 80, 2.0f);
  put_f16(b2.data() + 82, 0.5f);
  auto y2 = decode(GgmlType::kQ2_K, b2, 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y2[e], 2.0f * (sc[e / 16] & 15) * (q[e] & 3) - 0.5f * mn[e / 16]) << e;

  // Q3_K: hmask[32], qs[64], 12 bytes of 6-bit scales (stored +32), d. A set hmask bit means
  // the code is the low 2 bits as is; a clear one subtracts 4.
  std::vector<uint8_t> b3(110, 0);
  for (int e = 0; e < 256; ++e) {
    if (q[e] & 4) b3[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
    b3[32 + (e / 128) * 32 + e % 32] |= static_cast<uint8_t>((q[e] & 3) << (2 * ((e % 128) / 32)));
  }
  for (int i = 0; i < 16; ++i) {
    b3[96 + i % 8] |= static_cast<uint8_t>((sc[i] & 15) << (4 * (i / 8)));
    b3[104 + i % 4] |= static_cast<uint8_t>((sc[i] >> 4) << (2 * (i / 4)));
  }
  put_f16(b3.data() + 108, 0.125f);
  auto y3 = decode(GgmlType::kQ3_K, b3, 256);
  for (int e = 0; e < 256; ++e) {
    int code = (q[e] & 3) - ((q[e] & 4) ? 0 : 4);
    EXPECT_EQ(y3[e], 0.125f * (sc[e / 16] - 32) * code) << e;
  }
}

TEST(GgmlDequantTest, Q6_K) {
  std::mt19937 rng(9);
  std::vector<int> q(256);
  std::vector<int8_t> sc(16);
  for (auto& v : q) v = static_cast<int>(rng() % 64);
  for (auto& s : sc) s = static_cast<int8_t>(rng() % 256 - 128);
  // ql[128], qh[64], scales[16], d. Element e = 128h + r: nibble r/64 of ql[64h + r%64],
  // crumb r/32 of qh[32h + r%32].
  std::vector<uint8_t> b(210, 0);
  for (int e = 0; e < 256; ++e) {
    int h = e / 128, r = e % 128;
    b[64 * h + r % 64] |= static_cast<uint8_t>((q[e] & 15) << (4 * (r / 64)));
    b[128 + 32 * h + r % 32] |= static_cast<uint8_t>((q[e] >> 4) << (2 * (r / 32)));
  }
  std::memcpy(b.data() + 192, sc.data(), 16);
  put_f16(b.data() + 208, 0.03125f);
  auto y = decode(GgmlType::kQ6_K, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.03125f * sc[e / 16] * (q[e] - 32)) << e;
}

TEST(GgmlDequantTest, MultipleBlocksAreIndependent) {
  std::vector<uint8_t> b(68);
  put_f16(b.data(), 1.0f);
  put_f16(b.data() + 34, -2.0f);
  for (int j = 0; j < 32; ++j) b[2 + j] = b[36 + j] = static_cast<uint8_t>(j);
  auto y = decode(GgmlType::kQ8_0, b, 64);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], static_cast<float>(j));
    EXPECT_EQ(y[32 + j], -2.0f * j);
  }
}

TEST(GgmlDequantTest, Errors) {
  std::vector<uint8_t> b(144);
  std::vector<float> out(256);
  auto msg = [&](uint32_t type, std::span<const uint8_t> src, int64_t n, std::span<float> o) {
    Status st = dequantize_ggml(type, src, n, o);
    return st.ok() ? std::string("ok") : st.error().message;
  };
  EXPECT_EQ(msg(12, b, 256, out), "ok");
  EXPECT_EQ(msg(16, b, 256, out), "ggml type IQ2_XXS (id 16) is not supported for dequantization");
  EXPECT_EQ(msg(77, b, 256, out), "unknown ggml type id 77");
  EXPECT_EQ(msg(12, std::span(b).first(143), 256, out),
            "ggml Q4_K: 256 elements need 144 bytes, got 143");
  EXPECT_NE(msg(12, b, 128, std::span(out).first(128)), "ok");  // not a whole block
  EXPECT_NE(msg(12, b, 256, std::span(out).first(255)), "ok");
  EXPECT_NE(msg(12, b, -256, out), "ok");
  EXPECT_NE(msg(0, b, INT64_MAX, out), "ok");
  EXPECT_EQ(msg(0, {}, 0, {}), "ok");
}

}  // namespace
}  // namespace tq
