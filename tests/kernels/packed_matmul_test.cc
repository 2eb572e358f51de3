// Packed kernels on every SIMD target this machine runs (Highway's supported and compiled
// targets, each forced in turn) against the scalar references, for every format, bit width,
// group size, odd row counts and token counts 1..7. Tolerance: 1e-5 relative to Σ|terms|.
#define HWY_WANT_AVX3_DL  // list the same targets as the kernels compile
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/mlx_quant.h"
#include "kernels/amx_matmul.h"
#include "kernels/cpu_info.h"
#include "kernels/packed_matmul.h"
#include "tensor/dtype.h"

namespace tq {
namespace {

struct Case {
  std::vector<uint8_t> data, scales, biases;
  PackedMatrix m;
};

uint16_t f32_to(DType t, float f) { return t == DType::kBF16 ? f32_to_bf16(f) : f32_to_f16(f); }

void put_float(std::vector<uint8_t>& v, DType t, float f) {
  if (t == DType::kF32) {
    uint8_t b[4];
    std::memcpy(b, &f, 4);
    v.insert(v.end(), b, b + 4);
  } else {
    uint16_t h = f32_to(t, f);
    v.push_back(static_cast<uint8_t>(h & 0xFF));
    v.push_back(static_cast<uint8_t>(h >> 8));
  }
}

// Random packed bytes (every byte pattern is a valid code except fp8 NaN), sane scales.
Case make_case(WeightFormat f, int bits, int group, DType sdt, int64_t rows, int64_t cols,
               uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Case c;
  if (f == WeightFormat::kF32 || f == WeightFormat::kF16 || f == WeightFormat::kBF16) {
    DType dt = f == WeightFormat::kF32 ? DType::kF32
                                       : (f == WeightFormat::kF16 ? DType::kF16 : DType::kBF16);
    for (int64_t i = 0; i < rows * cols; ++i) put_float(c.data, dt, u(rng));
    c.m = make_float_matrix(dt, rows, cols, c.data).value();
    return c;
  }
  c.data.resize(static_cast<size_t>(rows * cols * bits / 8));
  for (auto& b : c.data) b = static_cast<uint8_t>(rng());
  const int64_t ng = rows * cols / group;
  QuantSpec spec;
  spec.bits = bits, spec.group_size = group;
  if (f == WeightFormat::kAffine) {
    for (int64_t i = 0; i < ng; ++i) {
      float s = u(rng) * 0.1f, b = u(rng);
      put_float(c.scales, sdt, s);
      put_float(c.biases, sdt, b);
    }
    c.m = make_quant_matrix(spec, rows, cols, c.data, sdt, c.scales, c.biases).value();
    return c;
  }
  spec.mode = f == WeightFormat::kMxfp4   ? QuantMode::kMxfp4
              : f == WeightFormat::kNvfp4 ? QuantMode::kNvfp4
                                          : QuantMode::kMxfp8;
  if (f == WeightFormat::kMxfp8)
    for (auto& b : c.data)
      if ((b & 0x7F) == 0x7F) b = 0x3C;  // no NaN codes
  for (int64_t i = 0; i < ng; ++i)
    c.scales.push_back(f == WeightFormat::kNvfp4 ? static_cast<uint8_t>(0x20 + rng() % 0x40)
                                                 : static_cast<uint8_t>(120 + rng() % 12));
  c.m = make_quant_matrix(spec, rows, cols, c.data, DType::kU8, c.scales, {}).value();
  return c;
}

std::vector<float> random_x(int64_t n, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (auto& v : x) v = nd(rng);
  return x;
}

float get_float(const std::vector<uint8_t>& v, DType t, int64_t i) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, v.data() + 4 * i, 4);
    return f;
  }
  uint16_t h = static_cast<uint16_t>(v[2 * i] | v[2 * i + 1] << 8);
  return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// Σ_k |x_k| (|ŵ_k| + 2|b|): bounds every term the kernels add (s·q·x and b·x separately).
double magnitude(const Case& c, const float* x, int64_t r) {
  const PackedMatrix& m = c.m;
  std::vector<float> row(static_cast<size_t>(m.cols));
  packed_decode_row_ref(m, r, row.data());
  double mag = 0.0;
  for (int64_t k = 0; k < m.cols; ++k) {
    double b = 0.0;
    if (m.format == WeightFormat::kAffine)
      b = std::fabs(get_float(c.biases, m.scale_dtype, r * m.groups() + k / m.group));
    mag += std::fabs(x[k]) * (std::fabs(row[k]) + 2.0 * b);
  }
  return mag;
}

// y [n, rows] of an integer path against its scalar reference ref (1e-5 of each output's
// magnitude) and against the f32-activation result fref (ftol of it: the rounding of x).
void expect_int_path_near(const Case& c, const std::vector<float>& x, int64_t n, int64_t rows,
                          const std::vector<float>& y, const std::vector<float>& ref,
                          const std::vector<float>& fref, double ftol) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      const size_t i = static_cast<size_t>(t * rows + r);
      const double mag = magnitude(c, x.data() + t * c.m.cols, r);
      ASSERT_NEAR(y[i], ref[i], 1e-5 * mag) << "t " << t << " r " << r;
      ASSERT_NEAR(y[i], fref[i], ftol * mag) << "t " << t << " r " << r;
    }
}

struct Spec {
  WeightFormat f;
  int bits, group;
  DType sdt;
};

std::vector<Spec> all_specs() {
  std::vector<Spec> v = {
      {WeightFormat::kF32, 32, 0, DType::kF32},   {WeightFormat::kF16, 16, 0, DType::kF16},
      {WeightFormat::kBF16, 16, 0, DType::kBF16}, {WeightFormat::kMxfp4, 4, 32, DType::kU8},
      {WeightFormat::kNvfp4, 4, 16, DType::kU8},  {WeightFormat::kMxfp8, 8, 32, DType::kU8}};
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int g : {32, 64, 128}) v.push_back({WeightFormat::kAffine, bits, g, DType::kBF16});
  v.push_back({WeightFormat::kAffine, 4, 64, DType::kF16});
  v.push_back({WeightFormat::kAffine, 4, 64, DType::kF32});
  v.push_back({WeightFormat::kAffine, 8, 32, DType::kF32});
  return v;
}

// Column counts: a multiple of every group (and of no vector width for floats), plus one
// that leaves a 32-column tail after 64-column steps.
std::vector<int64_t> col_counts(const Spec& s) {
  if (s.group == 0) return {77, 384};
  if (s.group <= 32) return {160, 384};
  return {384};
}

template <typename F>
void for_each_target(F&& body) {
  std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t t : targets) {
    hwy::SetSupportedTargetsForTest(t);
    SCOPED_TRACE(hwy::TargetName(t));
    ASSERT_STREQ(packed_kernel_isa(), hwy::TargetName(t));
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(PackedMatmul, RunsOnTheBestTargetOfThisMachine) {
  // The dispatch picks the best of the compiled targets the CPU supports (first in the list).
  std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  EXPECT_STREQ(packed_kernel_isa(), hwy::TargetName(targets.front()));
  // scripts/test prints this line: which targets the kernel tests below compare on this CPU.
  std::string names;
  for (int64_t t : targets) names += std::string(names.empty() ? "" : " ") + hwy::TargetName(t);
  std::printf("kernel targets compared on %s: %s\n", cpu_summary(cpu_info()).c_str(),
              names.c_str());
}

TEST(PackedMatmul, EachTargetNamesItsIntegerKernels) {
  for_each_target([] {
    const std::string isa = packed_kernel_isa(), path = packed_int8_path();
    if (isa == "AVX3_DL") {
#ifdef __clang__
      EXPECT_EQ(path, "none");  // clang 14 cannot add AVX-512 VNNI inside Highway's push
#else
      EXPECT_EQ(path, "avx512-vnni");
#endif
    } else if (isa == "AVX3") {
      EXPECT_EQ(path, "avx512/avx2 (no 8-bit)");
    } else if (isa == "AVX2") {
      EXPECT_EQ(path, "avx2 (no 8-bit)");
    } else {
      EXPECT_EQ(path, "none");
    }
  });
}

TEST(PackedMatmul, EveryTargetEqualsTheScalarReference) {
  const int64_t rows = 13;
  uint32_t seed = 1;
  for (const Spec& s : all_specs()) {
    for (int64_t cols : col_counts(s)) {
      Case c = make_case(s.f, s.bits, s.group, s.sdt, rows, cols, seed++);
      SCOPED_TRACE(weight_format_str(c.m) + " " + std::string(dtype_name(s.sdt)) + " cols " +
                   std::to_string(cols));
      const int64_t nmax = 7;
      std::vector<float> x = random_x(nmax, cols, seed++);
      std::vector<float> ref(static_cast<size_t>(nmax * rows));
      packed_matmul_ref(c.m, x.data(), nmax, ref.data(), rows, 0, rows);
      std::vector<double> mag(static_cast<size_t>(nmax * rows));
      for (int64_t t = 0; t < nmax; ++t)
        for (int64_t r = 0; r < rows; ++r) mag[t * rows + r] = magnitude(c, x.data() + t * cols, r);
      for_each_target([&] {
        std::vector<float> dec(static_cast<size_t>(cols)), dref(static_cast<size_t>(cols));
        packed_decode_row(c.m, rows - 1, dec.data());
        packed_decode_row_ref(c.m, rows - 1, dref.data());
        for (int64_t k = 0; k < cols; ++k) {
          // s·q + b may be fused (one rounding) or not: within an ulp of |s·q| + |b|.
          double b = 0.0;
          if (c.m.format == WeightFormat::kAffine)
            b = get_float(c.biases, s.sdt, (rows - 1) * c.m.groups() + k / c.m.group);
          ASSERT_NEAR(dec[k], dref[k], 1e-6 * (std::fabs(dref[k]) + 2 * std::fabs(b)) + 1e-30)
              << "k " << k;
        }
        for (int64_t n : {1, 2, 3, 4, 5, 7}) {
          // Rows split in two ranges, as the thread pool calls it.
          std::vector<float> y(static_cast<size_t>(n * rows), NAN);
          packed_matmul(c.m, x.data(), n, y.data(), rows, 0, 6);
          packed_matmul(c.m, x.data(), n, y.data(), rows, 6, rows);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              const size_t i = static_cast<size_t>(t * rows + r);
              ASSERT_NEAR(y[i], ref[i], 1e-5 * mag[i]) << "n " << n << " t " << t << " r " << r;
            }
        }
      });
    }
  }
}

// mxfp8 decode: rows of every non-NaN E4M3 code (subnormals, both zeros, the largest) and
// scales from 2^-127 to 2^6, each column alone (x one-hot): y is scale · value exactly, on
// every target; 5 rows run a 4-row step and a single row.
TEST(PackedMatmul, Mxfp8DecodeGivesEveryCodeExactly) {
  const int64_t rows = 5, cols = 256;
  Case c;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const uint8_t b = static_cast<uint8_t>((k + 37 * r) & 0xFF);
      c.data.push_back((b & 0x7F) == 0x7F ? 0x80 : b);
    }
  for (int64_t i = 0; i < rows * cols / 32; ++i) c.scales.push_back(i == 0 ? 0 : 112 + i % 22);
  QuantSpec spec;
  spec.mode = QuantMode::kMxfp8, spec.bits = 8, spec.group_size = 32;
  c.m = make_quant_matrix(spec, rows, cols, c.data, DType::kU8, c.scales, {}).value();
  for_each_target([&] {
    std::vector<float> x(static_cast<size_t>(cols), 0.0f), y(static_cast<size_t>(rows));
    for (int64_t k = 0; k < cols; ++k) {
      x[static_cast<size_t>(k)] = 1.0f;
      packed_matmul(c.m, x.data(), 1, y.data(), rows, 0, rows);
      x[static_cast<size_t>(k)] = 0.0f;
      for (int64_t r = 0; r < rows; ++r) {
        const float want = e8m0_to_f32(c.scales[static_cast<size_t>((r * cols + k) / 32)]) *
                           e4m3_to_f32(c.data[static_cast<size_t>(r * cols + k)]);
        ASSERT_EQ(y[static_cast<size_t>(r)], want) << "row " << r << " col " << k;
      }
    }
  });
}

// mxfp8 decode over the strips the kernel reads: 2048 columns take a strip's 8 rows from 8
// parts of the range, 160 columns (5 groups) 8 adjacent rows; ranges that leave 4-row steps
// and single rows.
TEST(PackedMatmul, Mxfp8DecodeEqualsTheReferenceOverStrips) {
  const int64_t rows = 21;
  uint32_t seed = 200;
  for (int64_t cols : {int64_t{160}, int64_t{2048}}) {
    Case c = make_case(WeightFormat::kMxfp8, 8, 32, DType::kU8, rows, cols, seed++);
    const int64_t n = 3;
    std::vector<float> x = random_x(n, cols, seed++);
    std::vector<float> ref(static_cast<size_t>(n * rows));
    packed_matmul_ref(c.m, x.data(), n, ref.data(), rows, 0, rows);
    SCOPED_TRACE("cols " + std::to_string(cols));
    for_each_target([&] {
      for (auto [a, b] : {std::pair<int64_t, int64_t>{0, 4}, {4, rows}, {0, rows}}) {
        std::vector<float> y(ref.size(), NAN);
        packed_matmul(c.m, x.data(), n, y.data(), rows, a, b, BatchKernel::kPerToken);
        packed_matmul(c.m, x.data(), 1, y.data(), rows, a, b);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t r = a; r < b; ++r) {
            const size_t i = static_cast<size_t>(t * rows + r);
            ASSERT_NEAR(y[i], ref[i], 1e-5 * magnitude(c, x.data() + t * cols, r))
                << "rows " << a << ".." << b << " t " << t << " r " << r;
          }
      }
    });
  }
}

TEST(PackedMatmul, Int8ActivationsEqualTheirScalarReference) {
  // Split 0..4, 4..21: strips of 8 (4-bit: 8 rows per step), 4, 1. Streamed, 576 and 2048
  // columns take a strip's rows from 2 and 4 parts of 4..21 (A adjacent rows each), the rest
  // in adjacent strips.
  const int64_t rows = 21;
  uint32_t seed = 100;
  int checked = 0;
  // Every affine width (4 and 8 with each scale dtype: read in place or converted; the narrow
  // widths' kernel reads bf16 and f32 alike), then mxfp4 and nvfp4.
  std::vector<Spec> specs;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int g : {32, 64, 128})
      for (DType sdt : {DType::kBF16, DType::kF32, DType::kF16})
        if (bits == 4 || bits == 8 || sdt != DType::kF16)
          specs.push_back({WeightFormat::kAffine, bits, g, sdt});
  specs.push_back({WeightFormat::kMxfp4, 4, 32, DType::kU8});
  specs.push_back({WeightFormat::kNvfp4, 4, 16, DType::kU8});
  for (const Spec& sp : specs)
    for (int64_t cols : {int64_t{160}, int64_t{384}, int64_t{576}, int64_t{2048}}) {
      const int g = sp.group, bits = sp.bits;
      const DType sdt = sp.sdt;
      if (cols % g != 0) continue;
      Case c = make_case(sp.f, bits, g, sdt, rows, cols, seed++);
      SCOPED_TRACE(weight_format_str(c.m) + " cols " + std::to_string(cols) + " scale dtype " +
                   std::to_string(static_cast<int>(sdt)));
      const int64_t n = 5;
      std::vector<float> x = random_x(n, cols, seed++);
      ActQ8 xq;
      quantize_act_q8(x.data(), n, cols, &xq);
      std::vector<float> ref(static_cast<size_t>(n * rows)), fref(ref.size());
      packed_matmul_q8_ref(c.m, xq, ref.data(), rows, 0, rows);
      packed_matmul_ref(c.m, x.data(), n, fref.data(), rows, 0, rows);
      // Two, three and five tokens, through each kernel choice (register tiles where the ISA
      // has them; the per-token kernels take 4-bit codes up to four tokens at a time).
      ActQ8 xq2, xq3;
      quantize_act_q8(x.data(), 2, cols, &xq2);
      quantize_act_q8(x.data(), 3, cols, &xq3);
      std::vector<ActQ8> each(static_cast<size_t>(n));  // every token alone
      for (int64_t t = 0; t < n; ++t) quantize_act_q8(x.data() + t * cols, 1, cols, &each[t]);
      for_each_target([&] {
        if (!packed_q8_supported(c.m)) return;
        ++checked;
        for (bool parts : {false, true}) {
          SCOPED_TRACE(parts ? "parts" : "adjacent strips");
          for (BatchKernel k : {BatchKernel::kAuto, BatchKernel::kPerToken, BatchKernel::kTiles}) {
            SCOPED_TRACE("kernel choice " + std::to_string(static_cast<int>(k)));
            for (const ActQ8* a : {&xq2, &xq3, &xq}) {
              SCOPED_TRACE("tokens " + std::to_string(a->n));
              std::vector<float> y(ref.size(), NAN);
              packed_matmul_q8(c.m, *a, y.data(), rows, 0, 4, parts, k);
              packed_matmul_q8(c.m, *a, y.data(), rows, 4, rows, parts, k);
              // Quantizing x to 8 bits moves the result by well under 1% of the magnitude.
              expect_int_path_near(c, x, a->n, rows, y, ref, fref, 1e-2);
              if (k == BatchKernel::kAuto) continue;
              // A fixed choice: every token's row has the bits it gets alone; 8-bit codes get
              // the per-token kernel's from the per-token choice at any count (tiles).
              const bool same_bits = c.m.format == WeightFormat::kAffine && c.m.bits == 8 &&
                                     k == BatchKernel::kPerToken;
              for (int64_t t = 0; t < a->n; ++t) {
                std::vector<float> alone(static_cast<size_t>(rows), NAN);
                packed_matmul_q8(c.m, each[t], alone.data(), rows, 0, rows, parts,
                                 same_bits ? BatchKernel::kPerToken : k);
                EXPECT_EQ(alone,
                          std::vector<float>(y.begin() + t * rows, y.begin() + (t + 1) * rows))
                    << "token " << t;
              }
            }
          }
        }
      });
    }
  // This machine class (x86-64 with AVX2) always has an int8 kernel for 4-bit.
  std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  bool x86_simd = false;
  for (int64_t t : targets) x86_simd |= std::string(hwy::TargetName(t)) == "AVX2";
  if (x86_simd) {
    EXPECT_GT(checked, 0);
  }
}

// Prepacked 2/3/4-bit codes (pack_lanes): every token count, aligned or not, gives the bits of
// the lanes kernel unpacking the codes itself, and each token the bits it gets alone.
TEST(PackedMatmul, PrepackedLanesKeepTheBatchKernelsBits) {
  uint32_t seed = 900;
  int checked = 0;
  for (const Spec& sp : {Spec{WeightFormat::kAffine, 4, 64, DType::kBF16},
                         Spec{WeightFormat::kAffine, 4, 32, DType::kF32},
                         Spec{WeightFormat::kAffine, 4, 128, DType::kF16},
                         Spec{WeightFormat::kAffine, 3, 64, DType::kBF16},
                         Spec{WeightFormat::kAffine, 2, 32, DType::kBF16}})
    for (int64_t rows : {int64_t{40}, int64_t{96}})
      for (int64_t cols : {int64_t{576}, int64_t{2048}}) {
        if (cols % sp.group != 0) continue;
        Case c = make_case(sp.f, sp.bits, sp.group, sp.sdt, rows, cols, seed++);
        SCOPED_TRACE(weight_format_str(c.m) + " rows " + std::to_string(rows) + " cols " +
                     std::to_string(cols));
        for_each_target([&] {
          std::vector<uint8_t> lanes = pack_lanes(c.m);
          if (lanes.empty()) return;
          ++checked;
          const int64_t strips = (rows + 31) / 32, es = dtype_size(sp.sdt);
          ASSERT_EQ(lanes.size(),
                    static_cast<size_t>(strips * (16 * cols + 2 * (cols / sp.group) * 32 * es)));
          PackedMatrix pre = c.m;
          use_lanes(pre, lanes);
          EXPECT_FALSE(packed_q8_reads_nibbles(pre, 1, BatchKernel::kPerToken));
          for (int64_t n : {1, 2, 5, 17}) {
            SCOPED_TRACE("tokens " + std::to_string(n));
            std::vector<float> x = random_x(n, cols, seed++);
            ActQ8 xq;
            quantize_act_q8(x.data(), n, cols, &xq);
            std::vector<float> want(static_cast<size_t>(n * rows), NAN), y(want.size(), NAN);
            packed_matmul_q8(c.m, xq, want.data(), rows, 0, rows, true, BatchKernel::kTiles);
            for (int64_t split : {int64_t{32}, int64_t{8}}) {  // aligned strips, then not
              packed_matmul_q8(pre, xq, y.data(), rows, 0, split, true, BatchKernel::kPerToken);
              packed_matmul_q8(pre, xq, y.data(), rows, split, rows, true, BatchKernel::kAuto);
              EXPECT_EQ(y, want) << "split at " << split;
            }
            for (int64_t t = 0; t < n; ++t) {
              ActQ8 one;
              quantize_act_q8(x.data() + t * cols, 1, cols, &one);
              std::vector<float> alone(static_cast<size_t>(rows), NAN);
              packed_matmul_q8(pre, one, alone.data(), rows, 0, rows, true, BatchKernel::kAuto);
              EXPECT_EQ(alone,
                        std::vector<float>(want.begin() + t * rows, want.begin() + (t + 1) * rows))
                  << "token " << t;
            }
          }
        });
      }
  bool dl = false;  // the lanes kernel's target
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) dl |= t == HWY_AVX3_DL;
  EXPECT_EQ(checked > 0, dl);
}

// packed_q8_reads_nibbles says which calls read ActQ8's nibble-order planes (the runtime skips
// filling them otherwise): where it says no, poisoned planes give the same bits; where it says
// yes, other results.
TEST(PackedMatmul, ReadsNibblesSaysWhoReadsTheNibbleOrder) {
  const int64_t rows = 40, cols = 576;
  uint32_t seed = 500;
  for (const Spec& sp : {Spec{WeightFormat::kAffine, 4, 64, DType::kBF16},
                         Spec{WeightFormat::kAffine, 3, 64, DType::kBF16},
                         Spec{WeightFormat::kAffine, 8, 32, DType::kF32},
                         Spec{WeightFormat::kMxfp4, 4, 32, DType::kU8}}) {
    Case c = make_case(sp.f, sp.bits, sp.group, sp.sdt, rows, cols, seed++);
    SCOPED_TRACE(weight_format_str(c.m));
    for_each_target([&] {
      if (!packed_q8_supported(c.m)) return;
      for (int64_t n : {1, 3, 16, 20})
        for (BatchKernel k : {BatchKernel::kAuto, BatchKernel::kPerToken, BatchKernel::kTiles}) {
          const bool reads = packed_q8_reads_nibbles(c.m, n, k);
          SCOPED_TRACE("tokens " + std::to_string(n) + " kernel " +
                       std::to_string(static_cast<int>(k)));
          std::vector<float> x = random_x(n, cols, seed++);
          ActQ8 xq;
          quantize_act_q8(x.data(), n, cols, &xq);
          std::vector<float> y0(static_cast<size_t>(n * rows)), y1(y0.size());
          packed_matmul_q8(c.m, xq, y0.data(), rows, 0, rows, true, k);
          std::fill(xq.q4.begin(), xq.q4.end(), int8_t{77});
          std::fill(xq.r4.begin(), xq.r4.end(), int8_t{-77});
          packed_matmul_q8(c.m, xq, y1.data(), rows, 0, rows, true, k);
          if (reads)
            EXPECT_NE(y0, y1);
          else
            EXPECT_EQ(y0, y1);
        }
    });
  }
}

// The AMX tile kernel against its scalar reference (and, loosely, the f32 product): every
// affine width, groups 64/128, f32 and bf16 scales, token counts that leave partial 16-token
// tiles, row ranges split at 16; the tiles hold exactly the scalar quantizer's values.
// The SIMD activation quantizer equals the scalar rule bit for bit on every target: blocks of 32
// (ActQ8) and 64 (AMX tiles), values on rounding ties, a zero block, large and tiny magnitudes.
TEST(QuantizeBlocks, EqualTheScalarQuantizerOnEveryTarget) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int len : {32, 64}) {
    const int64_t nb = 6;
    std::vector<float> x(static_cast<size_t>(nb * len));
    for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i < x.size() / 2 ? 1.0f : 1e-3f);
    for (int i = 0; i < len; ++i) x[len + i] = 0.0f;                      // block 1: zeros
    for (int i = 0; i < len; ++i) x[2 * len + i] = (i - len / 2) * 0.5f;  // ties of q and r
    x[2 * len] = 127.0f / 2;  // amax 63.5: x · 127 / amax lands on halves
    std::vector<int8_t> qw(x.size()), rw(x.size());
    std::vector<float> dw(nb), sw(nb);
    for (int64_t b = 0; b < nb; ++b)
      quantize_block_q8(x.data() + b * len, len, qw.data() + b * len, rw.data() + b * len, &dw[b],
                        &sw[b]);
    for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(t);
      SCOPED_TRACE(std::string(hwy::TargetName(t)) + " len " + std::to_string(len));
      std::vector<int8_t> q(x.size()), r(x.size());
      std::vector<float> d(nb), sum(nb);
      quantize_blocks_q8(x.data(), len, nb, q.data(), r.data(), d.data(), sum.data());
      EXPECT_EQ(q, qw);
      EXPECT_EQ(r, rw);
      for (int64_t b = 0; b < nb; ++b) {
        EXPECT_EQ(f32_to_bits(d[b]), f32_to_bits(dw[b])) << b;
        EXPECT_EQ(f32_to_bits(sum[b]), f32_to_bits(sw[b])) << b;
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

TEST(PackedMatmul, AmxEqualsItsScalarReference) {
  if (!amx_available()) {
    GTEST_SKIP() << "no AMX-INT8 on this machine";
  }
  const int64_t rows = 48;
  uint32_t seed = 500;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int g : {64, 128})
      for (int64_t cols : {int64_t{128}, int64_t{384}}) {
        if (cols % g != 0) continue;
        const DType sdt = bits == 4 && g == 64 ? DType::kF32 : DType::kBF16;
        Case c = make_case(WeightFormat::kAffine, bits, g, sdt, rows, cols, seed++);
        ASSERT_TRUE(amx_supported(c.m));
        // 64: two whole 16-token blocks per half (the transposed path); 40: one, then parts.
        for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{40}, int64_t{64}}) {
          SCOPED_TRACE(weight_format_str(c.m) + " cols " + std::to_string(cols) + " n " +
                       std::to_string(n));
          std::vector<float> x = random_x(n, cols, seed++);
          ActTiles xt;
          xt.q.assign(100000, 7), xt.r.assign(100000, 7);  // stale bytes must not leak in
          act_tiles_init(n, cols, &xt);
          quantize_act_tiles(x.data(), 0, n / 2, &xt);
          quantize_act_tiles(x.data(), n / 2, n, &xt);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t b = 0; b < cols / 64; ++b) {
              int8_t q[64], r[64];
              float d, sum;
              quantize_block_q8(x.data() + t * cols + b * 64, 64, q, r, &d, &sum);
              for (int64_t k = 0; k < 64; ++k) {
                ASSERT_EQ(act_tile_q(xt, t, b * 64 + k), q[k]) << "t " << t << " k " << k;
                ASSERT_EQ(act_tile_r(xt, t, b * 64 + k), r[k]) << "t " << t << " k " << k;
              }
              const size_t v = static_cast<size_t>(((t / 16) * (cols / 64) + b) * 16 + t % 16);
              ASSERT_EQ(xt.dv[v], d / 256.0f);
              ASSERT_EQ(xt.sum[v], sum);
            }
          std::vector<float> ref(static_cast<size_t>(n * rows)), y(ref.size(), NAN);
          std::vector<float> fref(ref.size());
          packed_matmul_tiles_ref(c.m, xt, ref.data(), rows, 0, rows);
          packed_matmul_ref(c.m, x.data(), n, fref.data(), rows, 0, rows);
          packed_matmul_amx(c.m, xt, y.data(), rows, 0, 16);
          packed_matmul_amx(c.m, xt, y.data(), rows, 16, rows);
          expect_int_path_near(c, x, n, rows, y, ref, fref, 1e-3);
        }
      }
}

// With grids centred as RTN makes them (b = -s·(2^bits - 1)/2), the integer path's error must be
// that of rounding x to steps of d/256 (two int8 planes), Σ w²·(d/256)²/12: the bias terms use
// the sums of x as quantized. (Exact Σx there makes the error scale with (w - b)², several times
// larger; one plane alone is 256² times larger: +0.3-0.5% PPL on SmolLM2.)
TEST(PackedMatmul, IntegerPathErrorIsThatOfRoundingTheActivations) {
  const int64_t rows = 64, cols = 576, n = 8;
  uint32_t seed = 900;
  for (int bits : {4, 8}) {
    Case c = make_case(WeightFormat::kAffine, bits, 64, DType::kF32, rows, cols, seed++);
    std::vector<uint8_t> centred;
    for (int64_t g = 0; g < rows * cols / 64; ++g)
      put_float(centred, DType::kF32,
                -get_float(c.scales, DType::kF32, g) * static_cast<float>((1 << bits) - 1) / 2);
    c.biases = centred;
    QuantSpec spec;
    spec.bits = bits, spec.group_size = 64;
    c.m = make_quant_matrix(spec, rows, cols, c.data, DType::kF32, c.scales, c.biases).value();
    std::vector<float> x = random_x(n, cols, seed++);
    ActQ8 xq;
    quantize_act_q8(x.data(), n, cols, &xq);
    std::vector<float> y(static_cast<size_t>(n * rows)), fref(y.size());
    packed_matmul_q8_ref(c.m, xq, y.data(), rows, 0, rows);
    packed_matmul_ref(c.m, x.data(), n, fref.data(), rows, 0, rows);
    double err2 = 0.0, want = 0.0, zero_point = 0.0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        const double e = y[t * rows + r] - fref[t * rows + r];
        err2 += e * e;
        for (int64_t k = 0; k < cols; ++k) {
          const double d = xq.d[t * (cols / 32) + k / 32], w = packed_weight(c.m, r, k);
          const double b = get_float(c.biases, DType::kF32, r * (cols / 64) + k / 64);
          const double step = d / 256;
          want += w * w * step * step / 12, zero_point += (w - b) * (w - b) * step * step / 12;
        }
      }
    SCOPED_TRACE("bits " + std::to_string(bits));
    EXPECT_GT(zero_point, 2.5 * want);  // the case tells the two apart
    EXPECT_LT(err2, 1.5 * want);
    EXPECT_GT(err2, 0.5 * want);
  }
}

TEST(PackedMatrix, RejectsSizesThatDoNotFitTheShape) {
  std::vector<uint8_t> w(64 * 4 / 8 * 2), s(2 * 2), b(2 * 2);
  QuantSpec spec;  // affine 4-bit g64
  EXPECT_TRUE(make_quant_matrix(spec, 2, 64, w, DType::kBF16, s, b).ok());
  EXPECT_FALSE(make_quant_matrix(spec, 2, 64, std::span(w).first(63), DType::kBF16, s, b).ok());
  EXPECT_FALSE(make_quant_matrix(spec, 2, 64, w, DType::kBF16, s, {}).ok());
  EXPECT_FALSE(make_quant_matrix(spec, 2, 96, w, DType::kBF16, s, b).ok());
  EXPECT_FALSE(make_quant_matrix(spec, 2, 64, w, DType::kU8, s, b).ok());
  EXPECT_FALSE(make_float_matrix(DType::kI32, 2, 2, w).ok());
}

}  // namespace
}  // namespace tq
