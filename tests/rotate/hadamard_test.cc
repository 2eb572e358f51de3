#include "rotate/hadamard.h"

#include <gtest/gtest.h>

#include <set>

#include "rotate/galois_field.h"

namespace tq {
namespace {

// HᵀH == K·I in exact integer arithmetic; also every entry is ±1.
void expect_hadamard(const HadamardMatrix& h) {
  ASSERT_EQ(h.h.size(), static_cast<size_t>(h.k * h.k)) << h.construction;
  for (int8_t v : h.h) ASSERT_TRUE(v == 1 || v == -1) << h.construction;
  for (int64_t i = 0; i < h.k; ++i)
    for (int64_t j = 0; j < h.k; ++j) {
      int64_t dot = 0;
      for (int64_t r = 0; r < h.k; ++r) dot += int64_t{h.at(r, i)} * h.at(r, j);
      ASSERT_EQ(dot, i == j ? h.k : 0)
          << h.construction << " K=" << h.k << " (" << i << "," << j << ")";
    }
}

TEST(GaloisField, PrimePowers) {
  EXPECT_EQ(as_prime_power(25)->p, 5);
  EXPECT_EQ(as_prime_power(25)->k, 2);
  EXPECT_EQ(as_prime_power(27)->k, 3);
  EXPECT_EQ(as_prime_power(139)->p, 139);
  EXPECT_FALSE(as_prime_power(1));
  EXPECT_FALSE(as_prime_power(39));
  EXPECT_FALSE(as_prime_power(155));
}

// Field axioms on GF(25) and GF(27): distributivity, inverses, (q−1)/2 nonzero squares.
TEST(GaloisField, AxiomsAndSquares) {
  for (int64_t q : {25, 27, 9, 13}) {
    GaloisField f(*as_prime_power(q));
    int squares = 0;
    for (int64_t a = 0; a < q; ++a) {
      squares += f.chi(a) == 1;
      bool has_inverse = a == 0;
      for (int64_t b = 0; b < q; ++b) {
        has_inverse = has_inverse || f.mul(a, b) == 1;
        EXPECT_EQ(f.sub(f.sub(a, b), a), f.sub(0, b)) << q;
        for (int64_t c = 0; c < q; c += 5)
          EXPECT_EQ(f.mul(a, f.sub(b, c)), f.sub(f.mul(a, b), f.mul(a, c))) << q;
      }
      EXPECT_TRUE(has_inverse) << q << " " << a;
    }
    EXPECT_EQ(squares, (q - 1) / 2) << q;
  }
}

// The orders the issue requires, and every constructible order up to 256.
TEST(Hadamard, RequiredOrdersAreExact) {
  for (int64_t k : {1, 2, 4, 12, 20, 28, 36, 40, 44, 52, 60, 108, 140}) {
    auto h = hadamard_matrix(k);
    ASSERT_TRUE(h.ok()) << k << ": " << h.error().message;
    EXPECT_EQ(h->k, k);
    expect_hadamard(*h);
  }
  int built = 0;
  for (int64_t k = 4; k <= 256; k += 4) {
    auto h = hadamard_matrix(k);
    if (!h.ok()) continue;
    expect_hadamard(*h);
    ++built;
  }
  EXPECT_GE(built, 55);  // of the 64 multiples of 4 up to 256
}

TEST(Hadamard, ConstructionsUsed) {
  EXPECT_EQ(*hadamard_construction(12), "paley1(q=11)");
  EXPECT_EQ(*hadamard_construction(28), "paley1(q=27)");  // GF(3³)
  EXPECT_EQ(*hadamard_construction(36), "paley2(q=17)");
  EXPECT_EQ(*hadamard_construction(40), "kron(sylvester(2),paley1(q=19))");
  EXPECT_EQ(*hadamard_construction(52), "paley2(q=25)");  // needs GF(5²)
  EXPECT_EQ(*hadamard_construction(140), "paley1(q=139)");
  EXPECT_EQ(*hadamard_construction(144), "kron(sylvester(2),paley1(q=71))");
  // Williamson-only orders (QuaRot's had156/had172) are out of reach: callers suggest random.
  EXPECT_FALSE(hadamard_construction(156));
  EXPECT_FALSE(hadamard_construction(172));
  EXPECT_FALSE(hadamard_construction(6));
}

// Paley I over a prime equals QuaRot's (I+S)ᵀ form: first row [1, −1, …], first column +1.
TEST(Hadamard, PaleyOneShape) {
  auto h = paley1_hadamard(11);
  ASSERT_TRUE(h.ok());
  for (int64_t j = 1; j < 12; ++j) EXPECT_EQ(h->at(0, j), -1);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(h->at(i, 0), 1);
  // χ over GF(11): squares {1, 3, 4, 5, 9}; H[i][j] = χ(i − j) off the diagonal.
  std::set<int64_t> sq = {1, 3, 4, 5, 9};
  for (int64_t i = 1; i < 12; ++i)
    for (int64_t j = 1; j < 12; ++j)
      if (i != j) {
        EXPECT_EQ(h->at(i, j), sq.count(((i - j) % 11 + 11) % 11) ? 1 : -1);
      }
  EXPECT_FALSE(paley1_hadamard(13).ok());  // 13 = 1 mod 4
  EXPECT_FALSE(paley2_hadamard(15).ok());  // not a prime power
}

TEST(Hadamard, KroneckerIsExact) {
  auto a = hadamard_matrix(12), b = hadamard_matrix(20);
  ASSERT_TRUE(a.ok() && b.ok());
  HadamardMatrix k = kronecker(*a, *b);
  EXPECT_EQ(k.k, 240);
  expect_hadamard(k);
}

// Hidden sizes and head_dims of the model cards (FORMATS.md §6.5; the table in docs/ROTATION.md).
TEST(Hadamard, ModelCardSizes) {
  struct Case {
    const char* model;
    int64_t n;
    int64_t k;
  };
  const Case cases[] = {
      {"SmolLM2-135M hidden", 576, 36},  {"SmolLM2-360M hidden", 960, 60},
      {"SmolLM2-1.7B hidden", 2048, 1},  {"Qwen2.5-0.5B hidden", 896, 28},
      {"Qwen2.5-1.5B hidden", 1536, 12}, {"Qwen2.5-3B hidden", 2048, 1},
      {"Qwen2.5-7B hidden", 3584, 28},   {"Qwen3-0.6B hidden", 1024, 1},
      {"Qwen3-1.7B hidden", 2048, 1},    {"Qwen3-4B hidden", 2560, 20},
      {"Qwen3-8B hidden", 4096, 1},      {"Llama-3.2-1B hidden", 2048, 1},
      {"Llama-3.2-3B hidden", 3072, 12}, {"Llama-3.1-8B hidden", 4096, 1},
      {"Llama-2-7B hidden", 4096, 1},    {"head_dim 64", 64, 1},
      {"head_dim 128", 128, 1},          {"Qwen2.5-14B hidden", 5120, 20},
  };
  for (const auto& c : cases) {
    auto s = hadamard_split(c.n);
    ASSERT_TRUE(s) << c.model;
    EXPECT_EQ(s->k, c.k) << c.model;
    EXPECT_EQ(s->k << s->m, c.n) << c.model;
  }
  EXPECT_FALSE(hadamard_split(156));
  EXPECT_FALSE(hadamard_split(9));
  EXPECT_EQ(hadamard_split(624)->k, 312);  // 39·16: Paley I over 311
}

}  // namespace
}  // namespace tq
