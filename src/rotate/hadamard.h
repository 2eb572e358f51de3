// Hadamard matrices built by our own code (FORMATS.md §6.5): Sylvester, Paley I, Paley II
// (prime-power fields) and Kronecker products, and the split n = K·2^m used by the fast
// randomized Hadamard rotation (the 2^m part is a Walsh–Hadamard butterfly, H_K is dense).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace tq {

// A ±1 matrix with HᵀH = K·I, row-major [K, K].
struct HadamardMatrix {
  int64_t k = 0;
  std::string construction;  // "sylvester", "paley1(q=11)", "paley2(q=13)", "kron(2,paley1(q=19))"
  std::vector<int8_t> h;
  int8_t at(int64_t i, int64_t j) const { return h[static_cast<size_t>(i * k + j)]; }
};

HadamardMatrix sylvester_hadamard(int64_t k);  // k a power of two: H[i][j] = (−1)^popcount(i&j)
// Paley I: q ≡ 3 (mod 4) a prime power, order q+1.
Result<HadamardMatrix> paley1_hadamard(int64_t q);
// Paley II: q ≡ 1 (mod 4) a prime power, order 2(q+1).
Result<HadamardMatrix> paley2_hadamard(int64_t q);
HadamardMatrix kronecker(const HadamardMatrix& a, const HadamardMatrix& b);

// How H_K is built, without building it: "sylvester", "paley1(q=..)", "paley2(q=..)",
// "kron(A,B)"; nullopt when none of our constructions reaches K. Tried in that order; a
// Kronecker split prefers the smallest left factor.
std::optional<std::string> hadamard_construction(int64_t k);
// H_K by the construction above, or an error naming K.
Result<HadamardMatrix> hadamard_matrix(int64_t k);

// n = K·2^m with the smallest constructible K (K = 1 when n is a power of two).
struct HadamardSplit {
  int64_t k = 1;
  int64_t m = 0;  // n = k << m
  std::string construction;
};
std::optional<HadamardSplit> hadamard_split(int64_t n);

bool is_power_of_two(int64_t n);

}  // namespace tq
