#include "kernels/gated_delta.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace tq {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// log g = -exp(a_log) · softplus(a + dt_bias), softplus as logaddexp(x, 0).
float log_decay(float a, float a_log, float dt_bias) {
  const float x = a + dt_bias;
  const float sp = std::max(x, 0.0f) + std::log1p(std::exp(-std::abs(x)));
  return -std::exp(a_log) * sp;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

// q <- dk^-1/2 q / sqrt(sum q^2 + 1e-6), k <- k / sqrt(sum k^2 + 1e-6), for every key head.
void gated_delta_normalize_qk(const GatedDeltaDims& d, float* qkv, int64_t n) {
  const int64_t c = d.conv_dim(), kd = d.key_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.dk));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t part = 0; part < 2; ++part)
      for (int64_t h = 0; h < d.hk; ++h) {
        float* x = qkv + t * c + part * kd + h * d.dk;
        float ss = 0.0f;
        for (int64_t j = 0; j < d.dk; ++j) ss += x[j] * x[j];
        const float inv = (part == 0 ? scale : 1.0f) / std::sqrt(ss + 1e-6f);
        for (int64_t j = 0; j < d.dk; ++j) x[j] *= inv;
      }
}

namespace {

// One token through value head h's state S [dv, dk] (decay, delta update, read-out). The dot
// products keep 8 partial sums so that the compiler may vectorize them (no reassociation).
void step_head(const GatedDeltaDims& d, float g, float beta, const float* q, const float* k,
               const float* v, float* S, float* y) {
  constexpr int64_t kLanes = 8;
  const int64_t body = d.dk / kLanes * kLanes;
  for (int64_t i = 0; i < d.dv; ++i) {
    float* row = S + i * d.dk;
    float pm[kLanes] = {}, po[kLanes] = {};
    for (int64_t j = 0; j < body; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) {
        row[j + l] *= g;
        pm[l] += row[j + l] * k[j + l];
      }
    for (int64_t j = body; j < d.dk; ++j) {
      row[j] *= g;
      pm[0] += row[j] * k[j];
    }
    float m = 0.0f;
    for (int64_t l = 0; l < kLanes; ++l) m += pm[l];
    const float delta = beta * (v[i] - m);
    for (int64_t j = 0; j < body; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) {
        row[j + l] += k[j + l] * delta;
        po[l] += row[j + l] * q[j + l];
      }
    for (int64_t j = body; j < d.dk; ++j) {
      row[j] += k[j] * delta;
      po[0] += row[j] * q[j];
    }
    float out = 0.0f;
    for (int64_t l = 0; l < kLanes; ++l) out += po[l];
    y[i] = out;
  }
}

// Tokens [t0, t0 + L) of value head h in the WY form. With lg_t the cumulative log decay over
// the chunk and S0 the state before it, the update vectors u_t (S_t = g_t S_{t-1} + u_t k_t^T)
// solve (I + A) U = diag(beta) V - diag(beta e^lg) K S0^T, A[t,i] = beta_t e^(lg_t-lg_i) k_t.k_i
// (i < t); then Y = diag(e^lg) Q S0^T + (e^(lg_t-lg_i) q_t.k_i)_(i<=t) U and
// S_L = e^lg_L S0 + U^T diag(e^(lg_L-lg_i)) K.
struct ChunkScratch {
  std::vector<float> lg, beta, kk, wm, um;
};

void chunk_head(const GatedDeltaDims& d, int64_t h, const float* qkv, const float* b,
                const float* a, float a_log, float dt_bias, float* S, int64_t t0, int64_t L,
                float* y, ChunkScratch& s, bool blas_solve) {
  const int64_t c = d.conv_dim(), kd = d.key_dim(), hkh = h / (d.hv / d.hk);
  const int64_t ydim = d.value_dim();
  const float* Q = qkv + t0 * c + hkh * d.dk;
  const float* K = qkv + t0 * c + kd + hkh * d.dk;
  const float* V = qkv + t0 * c + 2 * kd + h * d.dv;
  float* Y = y + t0 * ydim + h * d.dv;
  s.lg.resize(L), s.beta.resize(L), s.kk.resize(L * L);
  s.wm.resize(L * d.dk), s.um.resize(L * d.dv);
  float acc = 0.0f;
  for (int64_t t = 0; t < L; ++t) {
    acc += log_decay(a[(t0 + t) * d.hv + h], a_log, dt_bias);
    s.lg[t] = acc;
    s.beta[t] = sigmoid(b[(t0 + t) * d.hv + h]);
  }
  // KK = K K^T; the right-hand sides beta_t e^lg_t k_t and beta_t v_t.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, d.dk, 1.0f, K, c, K, c, 0.0f,
              s.kk.data(), L);
  for (int64_t t = 0; t < L; ++t) {
    const float wk = s.beta[t] * std::exp(s.lg[t]);
    for (int64_t j = 0; j < d.dk; ++j) s.wm[t * d.dk + j] = wk * K[t * c + j];
    for (int64_t j = 0; j < d.dv; ++j) s.um[t * d.dv + j] = s.beta[t] * V[t * c + j];
  }
  // A (strictly lower; the unit diagonal is implied), then the solve through I + A.
  for (int64_t t = 0; t < L; ++t)
    for (int64_t i = 0; i < t; ++i) s.kk[t * L + i] *= s.beta[t] * std::exp(s.lg[t] - s.lg[i]);
  if (blas_solve) {  // OpenBLAS's triangular solve: vectorized over the dk + dv columns
    cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, d.dk, 1.0f,
                s.kk.data(), L, s.wm.data(), d.dk);
    cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, d.dv, 1.0f,
                s.kk.data(), L, s.um.data(), d.dv);
  } else {  // the scalar reference: forward substitution row by row
    for (int64_t t = 1; t < L; ++t)
      for (int64_t i = 0; i < t; ++i) {
        const float at = s.kk[t * L + i];
        for (int64_t j = 0; j < d.dk; ++j) s.wm[t * d.dk + j] -= at * s.wm[i * d.dk + j];
        for (int64_t j = 0; j < d.dv; ++j) s.um[t * d.dv + j] -= at * s.um[i * d.dv + j];
      }
  }
  // U = Um - Wm S0^T.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, d.dv, d.dk, -1.0f, s.wm.data(), d.dk, S,
              d.dk, 1.0f, s.um.data(), d.dv);
  // Y = diag(e^lg) Q S0^T + M U, M the decayed causal q.k scores (kk reused).
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, d.dv, d.dk, 1.0f, Q, c, S, d.dk, 0.0f, Y,
              ydim);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, d.dk, 1.0f, Q, c, K, c, 0.0f,
              s.kk.data(), L);
  for (int64_t t = 0; t < L; ++t) {
    const float e = std::exp(s.lg[t]);
    for (int64_t j = 0; j < d.dv; ++j) Y[t * ydim + j] *= e;
    for (int64_t i = 0; i < L; ++i)
      s.kk[t * L + i] = i <= t ? std::exp(s.lg[t] - s.lg[i]) * s.kk[t * L + i] : 0.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, d.dv, L, 1.0f, s.kk.data(), L,
              s.um.data(), d.dv, 1.0f, Y, ydim);
  // S = e^lg_L S0 + U^T diag(e^(lg_L - lg_i)) K.
  for (int64_t i = 0; i < L; ++i) {
    const float w = std::exp(s.lg[L - 1] - s.lg[i]);
    for (int64_t j = 0; j < d.dv; ++j) s.um[i * d.dv + j] *= w;
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d.dv, d.dk, L, 1.0f, s.um.data(), d.dv, K, c,
              std::exp(s.lg[L - 1]), S, d.dk);
}

}  // namespace

void causal_conv1d_silu(const float* w, int64_t channels, int64_t kernel, float* state, float* x,
                        int64_t n, int64_t c0, int64_t c1) {
  const int64_t keep = kernel - 1, C = channels;
  if (c1 < 0) c1 = C;
  // The window [state; x] for channels [c0, c1) as rows: row r < keep from the state, else
  // x[r - keep] (copied: the conv writes x in place).
  const int64_t width = c1 - c0;
  std::vector<float> in(static_cast<size_t>((keep + n) * width));
  for (int64_t r = 0; r < keep + n; ++r)
    std::copy_n(r < keep ? state + r * C + c0 : x + (r - keep) * C + c0, width,
                in.data() + r * width);
  for (int64_t t = 0; t < n; ++t) {
    float* o = x + t * C + c0;
    for (int64_t ch = 0; ch < width; ++ch) {
      float acc = 0.0f;
      for (int64_t j = 0; j < kernel; ++j)
        acc += w[(c0 + ch) * kernel + j] * in[(t + j) * width + ch];
      o[ch] = silu(acc);
    }
  }
  for (int64_t r = 0; r < keep; ++r)
    std::copy_n(in.data() + (n + r) * width, width, state + r * C + c0);
}

void gated_delta_rule(const GatedDeltaDims& d, float* qkv, const float* b, const float* a,
                      const float* a_log, const float* dt_bias, float* state, int64_t n, float* y,
                      int64_t chunk) {
  gated_delta_normalize_qk(d, qkv, n);
  if (chunk > 1)
    gated_delta_chunks(d, qkv, b, a, a_log, dt_bias, state, n, y, chunk, 0, d.hv);
  else
    gated_delta_steps(d, qkv, b, a, a_log, dt_bias, state, n, y, 0, d.hv);
}

void gated_delta_chunks(const GatedDeltaDims& d, const float* qkv, const float* b, const float* a,
                        const float* a_log, const float* dt_bias, float* state, int64_t n, float* y,
                        int64_t chunk, int64_t h0, int64_t h1, bool blas_solve) {
  ChunkScratch s;
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t t0 = 0; t0 < n; t0 += chunk)
      chunk_head(d, h, qkv, b, a, a_log[h], dt_bias[h], state + h * d.dv * d.dk, t0,
                 std::min(chunk, n - t0), y, s, blas_solve);
}

void gated_delta_steps(const GatedDeltaDims& d, const float* qkv, const float* b, const float* a,
                       const float* a_log, const float* dt_bias, float* state, int64_t n, float* y,
                       int64_t h0, int64_t h1) {
  const int64_t c = d.conv_dim(), kd = d.key_dim(), ratio = d.hv / d.hk;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = qkv + t * c;
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t hkh = h / ratio;
      const float g = std::exp(log_decay(a[t * d.hv + h], a_log[h], dt_bias[h]));
      step_head(d, g, sigmoid(b[t * d.hv + h]), row + hkh * d.dk, row + kd + hkh * d.dk,
                row + 2 * kd + h * d.dv, state + h * d.dv * d.dk, y + t * d.value_dim() + h * d.dv);
    }
  }
}

void gated_rms_norm(float* y, const float* z, const float* w, int64_t rows, int64_t dv, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * dv;
    const float* zr = z + r * dv;
    double ss = 0.0;
    for (int64_t i = 0; i < dv; ++i) ss += static_cast<double>(yr[i]) * yr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dv) + eps));
    for (int64_t i = 0; i < dv; ++i) yr[i] = yr[i] * inv * w[i] * silu(zr[i]);
  }
}

}  // namespace tq
