#include "quant/grid_search.h"

#include <algorithm>
#include <cmath>

#include "formats/mlx_encode.h"
#include "formats/mlx_float.h"

namespace tq {

namespace {

// Range shrink factors tried: mx.quantize's full range down to 0.55 of it, centred.
constexpr int kShrinkSteps = 19;
constexpr double kShrinkStep = 0.025;
constexpr int kLloydRounds = 3;  // code → least-squares → code passes on the best candidate

struct Candidate {
  float s = 0.0f, b = 0.0f;
  double err = 0.0;
};

// Codes for (s, b), then the weighted least-squares (s, b) of those codes, rounded to dtype.
// False when the codes are all equal (the 2×2 system is singular).
bool lsq_refit(std::span<const float> w, std::span<const float> d, float s, float b, int bits,
               DType dtype, float* s_out, float* b_out) {
  double s0 = 0, s1 = 0, s2 = 0, t0 = 0, t1 = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    const double q = affine_code(w[k], s, b, bits);
    const double dk = d.empty() ? 1.0 : d[k];
    s0 += dk;
    s1 += dk * q;
    s2 += dk * q * q;
    t0 += dk * w[k];
    t1 += dk * q * w[k];
  }
  const double det = s0 * s2 - s1 * s1;
  if (!(det > 1e-12 * s0 * s2)) return false;
  const double ns = (s0 * t1 - s1 * t0) / det, nb = (s2 * t0 - s1 * t1) / det;
  if (!std::isfinite(ns) || !std::isfinite(nb) || ns == 0.0) return false;
  *s_out = round_to_dtype(static_cast<float>(ns), dtype);
  *b_out = round_to_dtype(static_cast<float>(nb), dtype);
  return *s_out != 0.0f && std::isfinite(*s_out) && std::isfinite(*b_out);
}

}  // namespace

const char* grid_choice_name(GridChoice g) {
  return g == GridChoice::kSearch ? "search" : "minmax";
}

bool parse_grid_choice(const std::string& s, GridChoice* out) {
  if (s == "minmax")
    *out = GridChoice::kMinMax;
  else if (s == "search")
    *out = GridChoice::kSearch;
  else
    return false;
  return true;
}

double affine_group_error(std::span<const float> w, std::span<const float> d, float s, float b,
                          int bits) {
  double e = 0.0;
  for (size_t k = 0; k < w.size(); ++k) {
    const float q = static_cast<float>(affine_code(w[k], s, b, bits));
    const double r = static_cast<double>(w[k]) - static_cast<double>(s * q + b);
    e += (d.empty() ? 1.0 : d[k]) * r * r;
  }
  return e;
}

StoredAffine search_affine_grid(std::span<const float> w, std::span<const float> d, int bits,
                                DType dtype) {
  const AffineGrid base = affine_grid(w, bits, dtype);
  Candidate best{base.stored_scale, base.stored_bias, 0.0};
  if (bits < 2 || w.empty()) return {best.s, best.b};
  best.err = affine_group_error(w, d, best.s, best.b, bits);
  float lo = w[0], hi = w[0];
  for (float x : w) lo = std::min(lo, x), hi = std::max(hi, x);
  if (!(hi > lo) || best.err == 0.0) return {best.s, best.b};
  const double nb = static_cast<double>((1 << bits) - 1), range = double{hi} - double{lo};
  const auto consider = [&](float s, float b) {
    if (!(s != 0.0f) || !std::isfinite(s) || !std::isfinite(b)) return;
    const double e = affine_group_error(w, d, s, b, bits);
    if (e < best.err) best = {s, b, e};
  };
  for (int i = 0; i < kShrinkSteps; ++i) {
    const double rho = 1.0 - kShrinkStep * i;
    const float s = round_to_dtype(static_cast<float>(rho * range / nb), dtype);
    const float b = round_to_dtype(static_cast<float>(lo + 0.5 * (1.0 - rho) * range), dtype);
    consider(s, b);
    float rs, rb;
    if (lsq_refit(w, d, s, b, bits, dtype, &rs, &rb)) consider(rs, rb);
  }
  for (int i = 0; i < kLloydRounds; ++i) {
    float rs, rb;
    const Candidate before = best;
    if (!lsq_refit(w, d, best.s, best.b, bits, dtype, &rs, &rb)) break;
    consider(rs, rb);
    if (best.err >= before.err) break;
  }
  return {best.s, best.b};
}

}  // namespace tq
