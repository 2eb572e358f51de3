#include "rotate/rotation.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tq {

namespace {

constexpr int64_t kPanel = 256;     // columns per panel of a Qᵀ·M fold
constexpr int64_t kRowChunk = 512;  // rows per dense product

// In-place Walsh–Hadamard butterfly (a, b) -> (a + b, a − b) over `len` (a power of two)
// vectors of `width` elements, vector i at v + i·width: v ← S·v with S Sylvester, natural order.
template <typename T>
void fwht(T* v, int64_t len, int64_t width) {
  for (int64_t h = 1; h < len; h *= 2)
    for (int64_t i = 0; i < len; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        T* a = v + j * width;
        T* b = v + (j + h) * width;
        for (int64_t e = 0; e < width; ++e) {
          T x = a[e], y = b[e];
          a[e] = x + y;
          b[e] = x - y;
        }
      }
}

// v [K, M·width] (block a = rows a·M … a·M+M−1, each `width` wide) ← H_Kᵀ·v, through `tmp`.
template <typename T>
void mix_blocks(const HadamardMatrix& hk, T* v, int64_t block, std::vector<T>& tmp) {
  const int64_t k = hk.k;
  tmp.assign(static_cast<size_t>(k * block), T(0));
  for (int64_t c = 0; c < k; ++c) {
    T* out = tmp.data() + c * block;
    for (int64_t a = 0; a < k; ++a) {
      const T* in = v + a * block;
      if (hk.at(a, c) > 0)
        for (int64_t e = 0; e < block; ++e) out[e] += in[e];
      else
        for (int64_t e = 0; e < block; ++e) out[e] -= in[e];
    }
  }
  std::copy(tmp.begin(), tmp.end(), v);
}

template <typename T>
void gemm(bool trans_a, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, CblasNoTrans, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

template <typename T>
const T* dense_of(const Rotation& r) {
  if constexpr (std::is_same_v<T, float>)
    return r.dense_f32.data();
  else
    return r.dense.data();
}

Result<Rotation> random_rotation(int64_t n, uint64_t seed) {
  Rotation r{.kind = RotationKind::kRandom, .n = n, .stream_seed = seed};
  SeededRng rng(seed);
  std::vector<double> g(static_cast<size_t>(n * n));
  for (auto& x : g) x = rng.gaussian();  // row-major G [n, n]
  std::vector<double> tau(static_cast<size_t>(n));
  if (LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, n, n, g.data(), n, tau.data()) != 0)
    return err("random rotation n={}: QR (dgeqrf) failed", n);
  std::vector<double> sgn(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) sgn[i] = g[i * n + i] < 0 ? -1.0 : 1.0;
  if (LAPACKE_dorgqr(LAPACK_ROW_MAJOR, n, n, n, g.data(), n, tau.data()) != 0)
    return err("random rotation n={}: QR (dorgqr) failed", n);
  // Q·diag(sign(diag R)): the QR with a positive diagonal, unique, so Q is Haar-distributed.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) g[i * n + j] *= sgn[j];
  r.dense = std::move(g);
  r.dense_f32.assign(r.dense.begin(), r.dense.end());
  return r;
}

}  // namespace

std::string_view rotation_kind_name(RotationKind k) {
  switch (k) {
    case RotationKind::kNone:
      return "none";
    case RotationKind::kHadamard:
      return "hadamard";
    case RotationKind::kRandom:
      return "random";
  }
  return "?";
}

Result<RotationKind> parse_rotation_kind(std::string_view s) {
  if (s == "none") return RotationKind::kNone;
  if (s == "hadamard") return RotationKind::kHadamard;
  if (s == "random") return RotationKind::kRandom;
  return err("unknown rotation kind '{}' (hadamard, random, none)", s);
}

uint64_t stream_seed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + (stream + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SeededRng::uniform01() { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }

double SeededRng::gaussian() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  double u1 = uniform01(), u2 = uniform01();
  double rad = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * std::numbers::pi * u2;
  spare_ = rad * std::sin(th);
  have_spare_ = true;
  return rad * std::cos(th);
}

std::string Rotation::signs_string() const {
  std::string s;
  s.reserve(signs.size());
  for (int8_t x : signs) s.push_back(x < 0 ? '-' : '+');
  return s;
}

Result<Rotation> make_rotation(RotationKind kind, int64_t n, uint64_t seed, std::string_view what,
                               std::string_view flag) {
  if (n < 1) return err("{} {}: cannot rotate an empty dimension", what, n);
  switch (kind) {
    case RotationKind::kNone:
      return Rotation{.kind = kind, .n = n, .stream_seed = seed};
    case RotationKind::kRandom:
      return random_rotation(n, seed);
    case RotationKind::kHadamard:
      break;
  }
  std::optional<HadamardSplit> split = hadamard_split(n);
  if (!split) {
    int64_t odd = n, m = 0;
    while (odd % 2 == 0) odd /= 2, ++m;
    return err(
        "{} {}: no Hadamard construction for n = {}·2^{} (K = {}·2^j is no Sylvester, Paley or "
        "Kronecker order we build); use {} random",
        what, n, odd, m, odd, flag);
  }
  TQ_TRY(HadamardMatrix hk, hadamard_matrix(split->k));
  Rotation r{.kind = kind, .n = n, .stream_seed = seed, .hk = std::move(hk), .m = split->m};
  SeededRng rng(seed);
  r.signs.resize(static_cast<size_t>(n));
  for (auto& s : r.signs) s = rng.sign();
  return r;
}

template <typename T>
void rotate_rows(const Rotation& r, T* rows, int64_t count) {
  const int64_t n = r.n;
  if (r.kind == RotationKind::kNone || count == 0) return;
  if (r.kind == RotationKind::kRandom) {
    std::vector<T> out(static_cast<size_t>(std::min(count, kRowChunk) * n));
    for (int64_t r0 = 0; r0 < count; r0 += kRowChunk) {
      const int64_t rc = std::min(kRowChunk, count - r0);
      gemm<T>(false, rc, n, n, rows + r0 * n, n, dense_of<T>(r), n, out.data(), n);
      std::copy(out.begin(), out.begin() + rc * n, rows + r0 * n);
    }
    return;
  }
  // x·D·(H_K ⊗ S)/√n: as X [K, M] (M = 2^m), H_Kᵀ·(X·S).
  const int64_t block = int64_t{1} << r.m;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(n)));
  std::vector<T> tmp;
  for (int64_t i = 0; i < count; ++i) {
    T* x = rows + i * n;
    for (int64_t e = 0; e < n; ++e) x[e] = r.signs[e] < 0 ? -x[e] : x[e];
    for (int64_t a = 0; a < r.hk.k; ++a) fwht(x + a * block, block, int64_t{1});
    if (r.hk.k > 1) mix_blocks(r.hk, x, block, tmp);
    for (int64_t e = 0; e < n; ++e) x[e] *= scale;
  }
}

template <typename T>
void rotate_cols_t(const Rotation& r, T* m, int64_t cols, int64_t stride) {
  const int64_t n = r.n;
  if (r.kind == RotationKind::kNone || cols == 0) return;
  std::vector<T> panel, tmp;
  for (int64_t c0 = 0; c0 < cols; c0 += kPanel) {
    const int64_t w = std::min(kPanel, cols - c0);
    panel.resize(static_cast<size_t>(n * w));
    for (int64_t i = 0; i < n; ++i)
      std::copy(m + i * stride + c0, m + i * stride + c0 + w, panel.data() + i * w);
    if (r.kind == RotationKind::kRandom) {
      tmp.resize(static_cast<size_t>(n * w));
      gemm<T>(true, n, w, n, dense_of<T>(r), n, panel.data(), w, tmp.data(), w);
      panel.swap(tmp);
    } else {
      // Qᵀ·P = (H_Kᵀ ⊗ S)·D·P/√n: rows scaled by signs, butterflies over whole rows, H_K mix.
      const int64_t block = int64_t{1} << r.m;
      const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(n)));
      for (int64_t i = 0; i < n; ++i)
        if (r.signs[i] < 0)
          for (int64_t e = 0; e < w; ++e) panel[i * w + e] = -panel[i * w + e];
      for (int64_t a = 0; a < r.hk.k; ++a) fwht(panel.data() + a * block * w, block, w);
      if (r.hk.k > 1) mix_blocks(r.hk, panel.data(), block * w, tmp);
      for (auto& x : panel) x *= scale;
    }
    for (int64_t i = 0; i < n; ++i)
      std::copy(panel.data() + i * w, panel.data() + (i + 1) * w, m + i * stride + c0);
  }
}

template void rotate_rows<float>(const Rotation&, float*, int64_t);
template void rotate_rows<double>(const Rotation&, double*, int64_t);
template void rotate_cols_t<float>(const Rotation&, float*, int64_t, int64_t);
template void rotate_cols_t<double>(const Rotation&, double*, int64_t, int64_t);

std::vector<double> rotation_matrix(const Rotation& r) {
  // Row i of Q is e_i·Q.
  std::vector<double> q(static_cast<size_t>(r.n * r.n), 0.0);
  for (int64_t i = 0; i < r.n; ++i) q[i * r.n + i] = 1.0;
  if (r.kind == RotationKind::kRandom) return r.dense;
  rotate_rows(r, q.data(), r.n);
  return q;
}

}  // namespace tq
