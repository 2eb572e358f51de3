#include "quant/grid_refit.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>

#include "formats/mlx_float.h"

namespace tq {

namespace {

// Per-row errors tr(d H dᵀ) of d = w − decoded(codes, grids), rows [r0, r0 + n).
void row_errors(const GroupCoder& coder, std::span<const float> w, int64_t r0, int64_t n,
                int64_t cols, std::span<const double> h, std::span<const uint8_t> codes,
                const std::vector<GroupGrid>& grids, std::vector<double>* d,
                std::vector<double>* dh, double* out) {
  const int64_t gs = coder.spec().group_size, ng = cols / gs;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = r0 + i;
    for (int64_t k = 0; k < cols; ++k)
      (*d)[i * cols + k] = static_cast<double>(w[r * cols + k]) -
                           coder.value(codes[r * cols + k], grids[r * ng + k / gs]);
  }
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n),
              static_cast<int>(cols), static_cast<int>(cols), 1.0, d->data(),
              static_cast<int>(cols), h.data(), static_cast<int>(cols), 0.0, dh->data(),
              static_cast<int>(cols));
  for (int64_t i = 0; i < n; ++i) {
    double e = 0.0;
    for (int64_t k = 0; k < cols; ++k) e += (*d)[i * cols + k] * (*dh)[i * cols + k];
    out[i] = e;
  }
}

// Solves the m×m SPD system a·x = y in place (x in y); a small ridge relative to each
// diagonal entry, larger on retry, absorbs near-singular groups (all codes equal).
bool solve_spd(std::vector<double>* a, std::vector<double>* y, int m) {
  const std::vector<double> a0 = *a, y0 = *y;
  for (double ridge : {1e-10, 1e-7, 1e-4}) {
    *a = a0;
    *y = y0;
    for (int i = 0; i < m; ++i) {
      const double dii = a0[static_cast<size_t>(i * m + i)];
      (*a)[static_cast<size_t>(i * m + i)] = dii + ridge * std::max(dii, 1e-30);
    }
    if (LAPACKE_dposv(LAPACK_ROW_MAJOR, 'U', m, 1, a->data(), m, y->data(), 1) != 0) continue;
    bool finite = true;
    for (double v : *y) finite = finite && std::isfinite(v);
    if (finite) return true;
  }
  return false;
}

}  // namespace

Result<RefitStats> refit_affine_grids(const GroupCoder& coder, std::span<const float> w,
                                      int64_t rows, int64_t cols, std::span<const double> h,
                                      std::span<const uint8_t> codes,
                                      std::vector<GroupGrid>* grids) {
  if (!coder.affine())
    return err("grid refit: {} has no affine grid", quant_spec_str(coder.spec()));
  const int64_t gs = coder.spec().group_size, ng = cols / gs;
  const int m = static_cast<int>(2 * ng);  // unknowns: s_0..s_{G-1}, b_0..b_{G-1}
  if (cols % gs != 0 || static_cast<int64_t>(w.size()) != rows * cols ||
      static_cast<int64_t>(h.size()) != cols * cols ||
      static_cast<int64_t>(codes.size()) != rows * cols ||
      static_cast<int64_t>(grids->size()) != rows * ng)
    return err("grid refit: inconsistent shapes");
  RefitStats st;
  // Bias-bias block, the same for every row: Σ_{k∈g, k'∈g'} H_kk'.
  std::vector<double> bb(static_cast<size_t>(ng * ng), 0.0);
  for (int64_t k = 0; k < cols; ++k)
    for (int64_t k2 = 0; k2 < cols; ++k2) bb[(k / gs) * ng + k2 / gs] += h[k * cols + k2];
  constexpr int64_t kChunk = 128;  // rows per pass, bounding the scratch
  const int64_t cn = std::min(rows, kChunk);
  std::vector<double> q(static_cast<size_t>(cn * cols)), p(q.size()), y(q.size());
  std::vector<double> d(q.size()), dh(q.size());
  std::vector<double> nrm(static_cast<size_t>(cn * m * m)), rhs(static_cast<size_t>(cn * m));
  std::vector<double> e_old(static_cast<size_t>(cn)), e_new(static_cast<size_t>(cn));
  std::vector<double> wd(q.size());
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t n = std::min(kChunk, rows - r0);
    for (int64_t i = 0; i < n * cols; ++i) {
      q[i] = codes[r0 * cols + i];
      wd[i] = w[r0 * cols + i];
    }
    std::fill(nrm.begin(), nrm.end(), 0.0);
    // Y = W·H: the right-hand sides Σ_{k∈g} q_k (WH)_k and Σ_{k∈g} (WH)_k.
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n),
                static_cast<int>(cols), static_cast<int>(cols), 1.0, wd.data(),
                static_cast<int>(cols), h.data(), static_cast<int>(cols), 0.0, y.data(),
                static_cast<int>(cols));
    for (int64_t i = 0; i < n; ++i) {
      double* ri = &rhs[i * m];
      std::fill(ri, ri + m, 0.0);
      for (int64_t k = 0; k < cols; ++k) {
        ri[k / gs] += q[i * cols + k] * y[i * cols + k];
        ri[ng + k / gs] += y[i * cols + k];
      }
    }
    // For each group g2: P = Q[:, g2] · H[g2, :]; then N[s_g, s_g2] = Σ_{k∈g} q_k P_k and
    // N[b_g, s_g2] = Σ_{k∈g} P_k.
    for (int64_t g2 = 0; g2 < ng; ++g2) {
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n),
                  static_cast<int>(cols), static_cast<int>(gs), 1.0, &q[g2 * gs],
                  static_cast<int>(cols), &h[g2 * gs * cols], static_cast<int>(cols), 0.0, p.data(),
                  static_cast<int>(cols));
      for (int64_t i = 0; i < n; ++i) {
        double* a = &nrm[i * m * m];
        for (int64_t k = 0; k < cols; ++k) {
          const int64_t g = k / gs;
          a[g * m + g2] += q[i * cols + k] * p[i * cols + k];
          a[(ng + g) * m + g2] += p[i * cols + k];
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      double* a = &nrm[i * m * m];
      for (int64_t g = 0; g < ng; ++g)
        for (int64_t g2 = 0; g2 < ng; ++g2) {
          a[g2 * m + ng + g] = a[(ng + g) * m + g2];  // s-b block by symmetry
          a[(ng + g) * m + ng + g2] = bb[g * ng + g2];
        }
    }
    row_errors(coder, w, r0, n, cols, h, codes, *grids, &d, &dh, e_old.data());
    std::vector<GroupGrid> old(grids->begin() + r0 * ng, grids->begin() + (r0 + n) * ng);
    std::vector<char> changed(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> a(nrm.begin() + i * m * m, nrm.begin() + (i + 1) * m * m);
      std::vector<double> x(rhs.begin() + i * m, rhs.begin() + (i + 1) * m);
      if (!solve_spd(&a, &x, m)) {
        ++st.rows_singular;
        continue;
      }
      bool usable = true;
      for (int64_t g = 0; g < ng; ++g) {
        const float s = round_to_dtype(static_cast<float>(x[g]), coder.dtype());
        const float b = round_to_dtype(static_cast<float>(x[ng + g]), coder.dtype());
        usable = usable && std::isfinite(s) && std::isfinite(b);
        (*grids)[(r0 + i) * ng + g].scale = s;
        (*grids)[(r0 + i) * ng + g].bias = b;
      }
      changed[i] = usable;
      if (!usable)
        std::copy(old.begin() + i * ng, old.begin() + (i + 1) * ng, grids->begin() + (r0 + i) * ng);
    }
    row_errors(coder, w, r0, n, cols, h, codes, *grids, &d, &dh, e_new.data());
    for (int64_t i = 0; i < n; ++i) {
      st.loss_before += e_old[i];
      if (changed[i] && e_new[i] < e_old[i]) {
        ++st.rows_refit;
        st.loss_after += e_new[i];
      } else {
        std::copy(old.begin() + i * ng, old.begin() + (i + 1) * ng, grids->begin() + (r0 + i) * ng);
        st.loss_after += e_old[i];
      }
    }
  }
  return st;
}

}  // namespace tq
