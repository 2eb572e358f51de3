#include "rotate/galois_field.h"

namespace tq {

namespace {

// Coefficients (low degree first, p-ary digits of `a`) of length k.
std::vector<int64_t> digits(int64_t a, int64_t p, int64_t k) {
  std::vector<int64_t> d(static_cast<size_t>(k));
  for (auto& x : d) x = a % p, a /= p;
  return d;
}

int64_t from_digits(const std::vector<int64_t>& d, int64_t p) {
  int64_t a = 0;
  for (size_t i = d.size(); i-- > 0;) a = a * p + d[i];
  return a;
}

// Remainder of `num` (any degree) modulo the monic `den`, coefficients mod p.
std::vector<int64_t> poly_mod(std::vector<int64_t> num, const std::vector<int64_t>& den,
                              int64_t p) {
  const size_t dd = den.size() - 1;
  for (size_t i = num.size(); i-- > dd;) {
    int64_t c = num[i] % p;
    if (c == 0) continue;
    for (size_t j = 0; j <= dd; ++j) num[i - dd + j] = ((num[i - dd + j] - c * den[j]) % p + p) % p;
  }
  num.resize(dd);
  return num;
}

// Monic polynomials of degree d over GF(p), enumerated by the integer of their low digits.
std::vector<int64_t> monic(int64_t low, int64_t p, int64_t d) {
  std::vector<int64_t> c = digits(low, p, d);
  c.push_back(1);
  return c;
}

bool irreducible(const std::vector<int64_t>& f, int64_t p) {
  const int64_t deg = static_cast<int64_t>(f.size()) - 1;
  for (int64_t d = 1; 2 * d <= deg; ++d) {
    int64_t count = 1;
    for (int64_t i = 0; i < d; ++i) count *= p;
    for (int64_t low = 0; low < count; ++low) {
      std::vector<int64_t> r = poly_mod(f, monic(low, p, d), p);
      bool zero = true;
      for (int64_t x : r) zero = zero && x == 0;
      if (zero) return false;
    }
  }
  return true;
}

}  // namespace

std::optional<PrimePower> as_prime_power(int64_t q) {
  if (q < 2) return std::nullopt;
  int64_t p = 2;
  while (p * p <= q && q % p != 0) ++p;
  if (q % p != 0) p = q;  // q itself is prime
  int64_t k = 0;
  while (q % p == 0) q /= p, ++k;
  if (q != 1) return std::nullopt;
  return PrimePower{p, k};
}

GaloisField::GaloisField(PrimePower pk) : p_(pk.p), k_(pk.k), q_(1) {
  for (int64_t i = 0; i < k_; ++i) q_ *= p_;
  if (k_ == 1) {
    modulus_ = {0, 1};  // x: reduction mod x is a no-op on constants
  } else {
    for (int64_t low = 0;; ++low) {
      std::vector<int64_t> f = monic(low, p_, k_);
      if (f[0] != 0 && irreducible(f, p_)) {
        modulus_ = std::move(f);
        break;
      }
    }
  }
  chi_.assign(static_cast<size_t>(q_), -1);
  chi_[0] = 0;
  for (int64_t x = 1; x < q_; ++x) chi_[static_cast<size_t>(mul(x, x))] = 1;
}

int64_t GaloisField::sub(int64_t a, int64_t b) const {
  if (k_ == 1) return ((a - b) % p_ + p_) % p_;
  std::vector<int64_t> da = digits(a, p_, k_), db = digits(b, p_, k_);
  for (size_t i = 0; i < da.size(); ++i) da[i] = ((da[i] - db[i]) % p_ + p_) % p_;
  return from_digits(da, p_);
}

int64_t GaloisField::mul(int64_t a, int64_t b) const {
  if (k_ == 1) return (a * b) % p_;
  std::vector<int64_t> da = digits(a, p_, k_), db = digits(b, p_, k_);
  std::vector<int64_t> prod(static_cast<size_t>(2 * k_ - 1), 0);
  for (size_t i = 0; i < da.size(); ++i)
    for (size_t j = 0; j < db.size(); ++j) prod[i + j] = (prod[i + j] + da[i] * db[j]) % p_;
  return from_digits(poly_mod(std::move(prod), modulus_, p_), p_);
}

}  // namespace tq
