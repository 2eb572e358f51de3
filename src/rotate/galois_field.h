// GF(q) for a prime power q = p^k, small enough for tables: what the Paley Hadamard
// constructions need (the quadratic character of every element).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tq {

// q = p^k with p prime and k >= 1, or nullopt.
struct PrimePower {
  int64_t p = 0;
  int64_t k = 0;
};
std::optional<PrimePower> as_prime_power(int64_t q);

// Elements are 0..q-1, read as the base-p digits of a polynomial over GF(p) (digit i is the
// coefficient of x^i), reduced modulo the lexicographically first monic irreducible of degree k.
class GaloisField {
 public:
  // q must be a prime power (checked by the caller through as_prime_power).
  explicit GaloisField(PrimePower pk);

  int64_t order() const { return q_; }
  int64_t sub(int64_t a, int64_t b) const;
  int64_t mul(int64_t a, int64_t b) const;
  // Quadratic character: 0 for 0, +1 for a nonzero square, -1 otherwise.
  int chi(int64_t a) const { return chi_[static_cast<size_t>(a)]; }

 private:
  int64_t p_, k_, q_;
  std::vector<int64_t> modulus_;  // monic irreducible: k+1 coefficients, low degree first
  std::vector<int8_t> chi_;
};

}  // namespace tq
