#include "rotate/hadamard.h"

#include <map>

#include "rotate/galois_field.h"

namespace tq {

namespace {

// How one H_K is made: a leaf construction or a Kronecker product of two smaller ones.
struct Recipe {
  enum Kind : uint8_t { kSylvester, kPaley1, kPaley2, kKron } kind;
  int64_t q = 0;  // Paley field order
  int64_t a = 0;  // Kronecker: left factor order (right = k / a)
};

std::optional<Recipe> find_recipe(int64_t k, std::map<int64_t, std::optional<Recipe>>& memo) {
  if (k < 1) return std::nullopt;
  if (is_power_of_two(k)) return Recipe{Recipe::kSylvester};
  if (k % 4 != 0) return std::nullopt;  // a Hadamard order above 2 is a multiple of 4
  if (auto it = memo.find(k); it != memo.end()) return it->second;
  std::optional<Recipe> r;
  if (auto pk = as_prime_power(k - 1); pk && (k - 1) % 4 == 3) {
    r = Recipe{Recipe::kPaley1, k - 1};
  } else if (auto pk2 = as_prime_power(k / 2 - 1); pk2 && (k / 2 - 1) % 4 == 1) {
    r = Recipe{Recipe::kPaley2, k / 2 - 1};
  } else {
    for (int64_t a = 2; a * a <= k && !r; ++a)
      if (k % a == 0 && find_recipe(a, memo) && find_recipe(k / a, memo))
        r = Recipe{Recipe::kKron, 0, a};
  }
  memo[k] = r;
  return r;
}

std::optional<Recipe> find_recipe(int64_t k) {
  std::map<int64_t, std::optional<Recipe>> memo;
  return find_recipe(k, memo);
}

std::string describe(int64_t k) {
  std::optional<Recipe> r = find_recipe(k);
  if (!r) return "";
  switch (r->kind) {
    case Recipe::kSylvester:
      return fmt::format("sylvester({})", k);
    case Recipe::kPaley1:
      return fmt::format("paley1(q={})", r->q);
    case Recipe::kPaley2:
      return fmt::format("paley2(q={})", r->q);
    case Recipe::kKron:
      return fmt::format("kron({},{})", describe(r->a), describe(k / r->a));
  }
  return "";
}

}  // namespace

bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

HadamardMatrix sylvester_hadamard(int64_t k) {
  HadamardMatrix m{k, fmt::format("sylvester({})", k), std::vector<int8_t>(k * k)};
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) m.h[i * k + j] = __builtin_popcountll(i & j) % 2 ? -1 : 1;
  return m;
}

Result<HadamardMatrix> paley1_hadamard(int64_t q) {
  auto pk = as_prime_power(q);
  if (!pk || q % 4 != 3) return err("Paley I needs a prime power q = 3 mod 4, got {}", q);
  GaloisField f(*pk);
  const int64_t k = q + 1;
  // (I + S)ᵀ: row 0 = [1, −1, …], column 0 = +1, H[i][j] = δ_ij + χ(e_i − e_j) (i, j >= 1).
  // For prime q this equals QuaRot's had12/had20/had60/had108/had140.
  HadamardMatrix m{k, fmt::format("paley1(q={})", q), std::vector<int8_t>(k * k)};
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      int v;
      if (i == 0)
        v = j == 0 ? 1 : -1;
      else if (j == 0)
        v = 1;
      else
        v = i == j ? 1 : f.chi(f.sub(i - 1, j - 1));
      m.h[i * k + j] = static_cast<int8_t>(v);
    }
  return m;
}

Result<HadamardMatrix> paley2_hadamard(int64_t q) {
  auto pk = as_prime_power(q);
  if (!pk || q % 4 != 1) return err("Paley II needs a prime power q = 1 mod 4, got {}", q);
  GaloisField f(*pk);
  const int64_t c = q + 1, k = 2 * c;
  // Symmetric conference matrix C [c, c]; H = C ⊗ [[1,1],[1,−1]] + I ⊗ [[1,−1],[−1,−1]].
  auto conf = [&](int64_t i, int64_t j) -> int {
    if (i == j) return 0;
    if (i == 0 || j == 0) return 1;
    return f.chi(f.sub(j - 1, i - 1));
  };
  static constexpr int kA[2][2] = {{1, 1}, {1, -1}}, kB[2][2] = {{1, -1}, {-1, -1}};
  HadamardMatrix m{k, fmt::format("paley2(q={})", q), std::vector<int8_t>(k * k)};
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
          m.h[(2 * i + a) * k + 2 * j + b] =
              static_cast<int8_t>(i == j ? kB[a][b] : conf(i, j) * kA[a][b]);
  return m;
}

HadamardMatrix kronecker(const HadamardMatrix& a, const HadamardMatrix& b) {
  const int64_t k = a.k * b.k;
  HadamardMatrix m{k, fmt::format("kron({},{})", a.construction, b.construction),
                   std::vector<int8_t>(k * k)};
  for (int64_t i = 0; i < a.k; ++i)
    for (int64_t j = 0; j < a.k; ++j)
      for (int64_t r = 0; r < b.k; ++r)
        for (int64_t s = 0; s < b.k; ++s)
          m.h[(i * b.k + r) * k + j * b.k + s] = static_cast<int8_t>(a.at(i, j) * b.at(r, s));
  return m;
}

std::optional<std::string> hadamard_construction(int64_t k) {
  if (!find_recipe(k)) return std::nullopt;
  return describe(k);
}

Result<HadamardMatrix> hadamard_matrix(int64_t k) {
  std::optional<Recipe> r = find_recipe(k);
  if (!r) return err("no Hadamard construction of order {}", k);
  switch (r->kind) {
    case Recipe::kSylvester:
      return sylvester_hadamard(k);
    case Recipe::kPaley1:
      return paley1_hadamard(r->q);
    case Recipe::kPaley2:
      return paley2_hadamard(r->q);
    case Recipe::kKron: {
      TQ_TRY(HadamardMatrix a, hadamard_matrix(r->a));
      TQ_TRY(HadamardMatrix b, hadamard_matrix(k / r->a));
      return kronecker(a, b);
    }
  }
  return err("no Hadamard construction of order {}", k);
}

std::optional<HadamardSplit> hadamard_split(int64_t n) {
  if (n < 1) return std::nullopt;
  int64_t odd = n, m = 0;
  while (odd % 2 == 0) odd /= 2, ++m;
  // K = odd·2^j for the smallest j that some construction reaches; the rest is 2^m.
  for (int64_t j = 0; j <= m; ++j) {
    const int64_t k = odd << j;
    if (find_recipe(k)) return HadamardSplit{k, m - j, describe(k)};
  }
  return std::nullopt;
}

}  // namespace tq
