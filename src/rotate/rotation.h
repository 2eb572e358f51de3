// Orthogonal n×n rotations Q for the folds (FORMATS.md §6.3, §6.5), pinned by a seed:
//   hadamard: Q = D·(H_K ⊗ H_{2^m})/√n, D = diag(±1) — applied with a Walsh–Hadamard butterfly
//             on the 2^m part and a dense K×K mix, never as a dense n×n product;
//   random:   Q from the QR of a Gaussian matrix (LAPACKE), columns' signs fixed so that R has
//             a positive diagonal.
// Determinism: every random draw comes from std::mt19937_64 (its output sequence is fixed by
// the C++ standard) seeded with stream_seed(seed, stream); Gaussians use our own Box–Muller.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "rotate/hadamard.h"

namespace tq {

enum class RotationKind : uint8_t { kNone, kHadamard, kRandom };
std::string_view rotation_kind_name(RotationKind k);  // "none", "hadamard", "random"
Result<RotationKind> parse_rotation_kind(std::string_view s);

// splitmix64(seed + (stream + 1)·0x9E3779B97F4A7C15): stream 0 is R1, stream 1 + L is R2 of
// layer L.
uint64_t stream_seed(uint64_t seed, uint64_t stream);

// Uniform and Gaussian draws from a seeded mt19937_64, independent of the standard library's
// distribution classes (whose algorithms are implementation-defined).
class SeededRng {
 public:
  explicit SeededRng(uint64_t seed) : gen_(seed) {}
  uint64_t next() { return gen_(); }
  int8_t sign() { return (next() >> 63) ? -1 : 1; }
  double uniform01();  // ((next() >> 11) + 1)·2^−53, in (0, 1]
  double gaussian();   // Box–Muller: pairs sqrt(−2 ln u1)·(cos, sin)(2π u2), cos first

 private:
  std::mt19937_64 gen_;
  bool have_spare_ = false;
  double spare_ = 0.0;
};

struct Rotation {
  RotationKind kind = RotationKind::kNone;
  int64_t n = 0;
  uint64_t stream_seed = 0;
  // hadamard
  HadamardMatrix hk;  // H_K (K = hk.k), n = K·2^m
  int64_t m = 0;
  std::vector<int8_t> signs;  // D, n entries ±1
  // random
  std::vector<double> dense;     // Q, row-major [n, n]
  std::vector<float> dense_f32;  // the same, rounded (f32 folds)

  std::string signs_string() const;  // "+-+…", n characters (hadamard only)
};

// `what` names the rotated dimension in errors, e.g. "hidden_size" (R1) or "head_dim" (R2);
// `flag` is the option that chose this kind, for the suggestion ("--r1").
Result<Rotation> make_rotation(RotationKind kind, int64_t n, uint64_t stream_seed,
                               std::string_view what, std::string_view flag);

// rows ← rows·Q for `count` contiguous rows of length n.
template <typename T>
void rotate_rows(const Rotation& r, T* rows, int64_t count);
// M ← Qᵀ·M for M [n, cols] row-major with row stride `stride` (>= cols).
template <typename T>
void rotate_cols_t(const Rotation& r, T* m, int64_t cols, int64_t stride);

// Q as a dense row-major [n, n] matrix (tests, --save-rotations).
std::vector<double> rotation_matrix(const Rotation& r);

}  // namespace tq
