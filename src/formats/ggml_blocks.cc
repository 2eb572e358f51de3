#include "formats/ggml_blocks.h"

#include <array>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"

namespace tq {

namespace {

constexpr int kQK = 256;  // elements per k-quant super-block (QK_K)

struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};

// Every ggml type gguf-py 0.19 knows, so errors can name the ones we cannot decode. Q8_1 is
// ggml's current 36-byte block (two f16), where gguf-py still says 40.
constexpr std::array<TypeRow, 34> kTypes = {{
    {0, {"F32", 1, 4, true}},          {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", 32, 18, true}},       {3, {"Q4_1", 32, 20, true}},
    {6, {"Q5_0", 32, 22, true}},       {7, {"Q5_1", 32, 24, true}},
    {8, {"Q8_0", 32, 34, true}},       {9, {"Q8_1", 32, 36, false}},
    {10, {"Q2_K", kQK, 84, true}},     {11, {"Q3_K", kQK, 110, true}},
    {12, {"Q4_K", kQK, 144, true}},    {13, {"Q5_K", kQK, 176, true}},
    {14, {"Q6_K", kQK, 210, true}},    {15, {"Q8_K", kQK, 292, false}},
    {16, {"IQ2_XXS", kQK, 66, false}}, {17, {"IQ2_XS", kQK, 74, false}},
    {18, {"IQ3_XXS", kQK, 98, false}}, {19, {"IQ1_S", kQK, 50, false}},
    {20, {"IQ4_NL", 32, 18, false}},   {21, {"IQ3_S", kQK, 110, false}},
    {22, {"IQ2_S", kQK, 82, false}},   {23, {"IQ4_XS", kQK, 136, false}},
    {24, {"I8", 1, 1, false}},         {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},        {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},        {29, {"IQ1_M", kQK, 56, false}},
    {30, {"BF16", 1, 2, true}},        {34, {"TQ1_0", kQK, 54, false}},
    {35, {"TQ2_0", kQK, 66, false}},   {39, {"MXFP4", 32, 17, true}},
    {40, {"NVFP4", 64, 36, false}},    {41, {"Q1_0", 128, 18, false}},
}};

// Each decoder turns one block at `b` into block_elems floats at `y`. The arithmetic mirrors
// gguf-py: f32 throughout, sub-block scales (d*sc) rounded before use. Every product that is
// followed by an add or subtract is exact in f32 (an f16 times integers below 2^7), so FMA
// contraction cannot change a result and none of it needs a barrier.

// Q4_0: f16 d, 16 bytes of nibbles; element j<16 is the low nibble of byte j, j>=16 the high
// nibble of byte j-16. y = d * (q - 8).
void block_q4_0(const uint8_t* b, float* y) {
  float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0xF) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// Q4_1: f16 d, f16 m, 16 bytes of nibbles. y = d*q + m.
void block_q4_1(const uint8_t* b, float* y) {
  float d = load_f16(b), m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0xF) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

// Fifth bits of Q5_0/Q5_1: bit j of a little-endian uint32.
inline int high_bit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

// Q5_0: f16 d, 4 bytes of high bits, 16 bytes of nibbles. y = d * (q - 16).
void block_q5_0(const uint8_t* b, float* y) {
  float d = load_f16(b);
  const uint8_t* qh = b + 2;
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    int lo = (qs[j] & 0xF) | high_bit(qh, j) << 4;
    int hi = (qs[j] >> 4) | high_bit(qh, j + 16) << 4;
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

// Q5_1: f16 d, f16 m, 4 bytes of high bits, 16 bytes of nibbles. y = d*q + m.
void block_q5_1(const uint8_t* b, float* y) {
  float d = load_f16(b), m = load_f16(b + 2);
  const uint8_t* qh = b + 4;
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    int lo = (qs[j] & 0xF) | high_bit(qh, j) << 4;
    int hi = (qs[j] >> 4) | high_bit(qh, j + 16) << 4;
    y[j] = d * static_cast<float>(lo) + m;
    y[j + 16] = d * static_cast<float>(hi) + m;
  }
}

// Q8_0: f16 d, 32 int8. y = q * d.
void block_q8_0(const uint8_t* b, float* y) {
  float d = load_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// 2-bit field of the k-quant layout shared by Q2_K and Q3_K: element e of the super-block
// lives in byte (e/128)*32 + e%32 at bit shift 2*((e%128)/32).
inline int crumb(const uint8_t* qs, int e) {
  return (qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// Q2_K: 16 scale bytes (low nibble scale, high nibble min), 64 bytes of 2-bit codes, f16 d,
// f16 dmin. Sub-block i (16 elements): y = (d*sc_i)*q - dmin*m_i.
void block_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  float d = load_f16(b + 80), dmin = load_f16(b + 82);
  for (int i = 0; i < 16; ++i) {
    float dl = d * static_cast<float>(scales[i] & 0xF);
    float ml = dmin * static_cast<float>(scales[i] >> 4);
    for (int k = 0; k < 16; ++k) {
      int e = i * 16 + k;
      y[e] = dl * static_cast<float>(crumb(qs, e)) - ml;
    }
  }
}

// Q3_K: 32 bytes hmask, 64 bytes of 2-bit low codes, 12 bytes of 6-bit scales, f16 d.
// q = low - 4 unless the hmask bit is set; sub-block i: y = (d*(sc_i - 32)) * q.
void block_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  float d = load_f16(b + 108);
  for (int i = 0; i < 16; ++i) {
    // Low 4 bits: nibble (i/8) of byte i%8; high 2 bits: bits 2*(i/4) of byte 8 + i%4.
    int lo = (sc[i % 8] >> (4 * (i / 8))) & 0xF;
    int hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    float dl = d * static_cast<float>((lo | hi << 4) - 32);
    for (int k = 0; k < 16; ++k) {
      int e = i * 16 + k;
      int h = (hmask[e % 32] >> (e / 32)) & 1;
      y[e] = dl * static_cast<float>(crumb(qs, e) - (h ? 0 : 4));
    }
  }
}

// 6-bit scale and min of sub-block i (0..7) from the 12-byte Q4_K/Q5_K scale field.
inline void scale_min_k4(const uint8_t* s, int i, int* sc, int* m) {
  if (i < 4) {
    *sc = s[i] & 0x3F;
    *m = s[i + 4] & 0x3F;
  } else {
    *sc = (s[i + 4] & 0xF) | ((s[i - 4] >> 2) & 0x30);
    *m = (s[i + 4] >> 4) | ((s[i] >> 2) & 0x30);
  }
}

// Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles. Sub-block i (32 elements) is
// the low (i even) or high (i odd) nibbles of bytes 32*(i/2)..+31. y = (d*sc)*q - dmin*m.
void block_q4_k(const uint8_t* b, float* y) {
  float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int i = 0; i < 8; ++i) {
    int sc, m;
    scale_min_k4(scales, i, &sc, &m);
    float dl = d * static_cast<float>(sc);
    float ml = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (i / 2);
    int shift = 4 * (i % 2);
    for (int l = 0; l < 32; ++l)
      y[i * 32 + l] = dl * static_cast<float>((q[l] >> shift) & 0xF) - ml;
  }
}

// Q5_K: as Q4_K plus 32 bytes qh after the scales; bit i of qh[l] is the fifth bit of element
// l of sub-block i.
void block_q5_k(const uint8_t* b, float* y) {
  float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int i = 0; i < 8; ++i) {
    int sc, m;
    scale_min_k4(scales, i, &sc, &m);
    float dl = d * static_cast<float>(sc);
    float ml = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (i / 2);
    int shift = 4 * (i % 2);
    for (int l = 0; l < 32; ++l) {
      int v = ((q[l] >> shift) & 0xF) | ((qh[l] >> i) & 1) << 4;
      y[i * 32 + l] = dl * static_cast<float>(v) - ml;
    }
  }
}

// Q6_K: 128 bytes low nibbles, 64 bytes of 2-bit highs, 16 int8 scales, f16 d. In half h
// (128 elements), element r uses nibble r/64 of ql[64h + r%64] and crumb r/32 of
// qh[32h + r%32]; y = (d*sc[e/16]) * (q - 32).
void block_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  float d = load_f16(b + 208);
  for (int i = 0; i < 16; ++i) {
    float dl = d * static_cast<float>(sc[i]);
    for (int k = 0; k < 16; ++k) {
      int e = i * 16 + k, h = e / 128, r = e % 128;
      int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
      int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
      y[e] = dl * static_cast<float>((lo | hi << 4) - 32);
    }
  }
}

// MXFP4: E8M0 byte e, 16 bytes of E2M1 nibbles (element j<16 the low nibble of byte j). gguf-py
// scales doubled E2M1 values (0, 1, 2, 3, 4, 6, 8, 12, signed) by 2^(e-128): y = k[q] * 2^(e-128),
// a power of two times a small integer, so the product is exact.
void block_mxfp4(const uint8_t* b, float* y) {
  static constexpr float kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const float d = std::ldexp(1.0f, static_cast<int>(b[0]) - 128);
  for (int j = 0; j < 16; ++j) {
    y[j] = kValues[b[1 + j] & 0xF] * d;
    y[j + 16] = kValues[b[1 + j] >> 4] * d;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_decoder(uint32_t id) {
  switch (static_cast<GgmlType>(id)) {
    case GgmlType::kQ4_0:
      return block_q4_0;
    case GgmlType::kQ4_1:
      return block_q4_1;
    case GgmlType::kQ5_0:
      return block_q5_0;
    case GgmlType::kQ5_1:
      return block_q5_1;
    case GgmlType::kQ8_0:
      return block_q8_0;
    case GgmlType::kQ2_K:
      return block_q2_k;
    case GgmlType::kQ3_K:
      return block_q3_k;
    case GgmlType::kQ4_K:
      return block_q4_k;
    case GgmlType::kQ5_K:
      return block_q5_k;
    case GgmlType::kQ6_K:
      return block_q6_k;
    case GgmlType::kMXFP4:
      return block_mxfp4;
    default:
      return nullptr;
  }
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type_id) {
  for (const auto& t : kTypes)
    if (t.id == type_id) return t.info;
  return std::nullopt;
}

int64_t ggml_row_bytes(const GgmlTypeInfo& info, int64_t n) {
  if (n < 0 || info.block_elems <= 0 || n % info.block_elems != 0) return -1;
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n / info.block_elems, info.block_bytes, &bytes)) return -1;
  return bytes;
}

Status dequantize_ggml(uint32_t type_id, std::span<const uint8_t> src, int64_t n,
                       std::span<float> out) {
  auto info = ggml_type_info(type_id);
  if (!info) return err("unknown ggml type id {}", type_id);
  if (!info->can_dequantize)
    return err("ggml type {} (id {}) is not supported for dequantization", info->name, type_id);
  if (n < 0 || n % info->block_elems != 0)
    return err("ggml {}: {} elements is not a multiple of the block size {}", info->name, n,
               info->block_elems);
  int64_t bytes = ggml_row_bytes(*info, n);
  if (bytes < 0) return err("ggml {}: {} elements is too large", info->name, n);
  if (static_cast<int64_t>(src.size()) != bytes)
    return err("ggml {}: {} elements need {} bytes, got {}", info->name, n, bytes, src.size());
  if (static_cast<int64_t>(out.size()) != n)
    return err("ggml {}: output holds {} values, expected {}", info->name, out.size(), n);

  const uint8_t* p = src.data();
  float* y = out.data();
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::kF32:
      if (n > 0) std::memcpy(y, p, static_cast<size_t>(n) * 4);
      return ok_status();
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) y[i] = load_f16(p + 2 * i);
      return ok_status();
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) y[i] = load_bf16(p + 2 * i);
      return ok_status();
    default:
      break;
  }
  BlockFn fn = block_decoder(type_id);
  if (!fn) return err("ggml type {} (id {}) has no decoder", info->name, type_id);
  const int64_t blocks = n / info->block_elems;
  for (int64_t i = 0; i < blocks; ++i) fn(p + i * info->block_bytes, y + i * info->block_elems);
  return ok_status();
}

}  // namespace tq
