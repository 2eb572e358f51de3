// GPTQ sweep (FORMATS.md §5.2). The working matrix is held transposed in f64, WT [cols, rows],
// so that a column of W is contiguous: the per-column error feedback is a run of axpys and the
// lazy block update is one dgemm. Grids and codes are computed on the f32 rounding of the
// updated weights, as MLX would see them.
#include "quant/gptq.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "formats/mlx_encode.h"
#include "formats/mlx_float.h"
#include "formats/mlx_quant.h"
#include "quant/grid_refit.h"
#include "quant/group_grid.h"
#include "tensor/tensor.h"

namespace tq {

namespace {

Status check_shape(const QuantSpec& spec, DType dtype, int64_t rows, int64_t cols, size_t n_w) {
  TQ_CHECK_OK(validate_quant_spec(spec));
  const std::string what = "gptq " + quant_spec_str(spec);
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16)
    return err("{}: cannot store scales as {}", what, dtype_name(dtype));
  if (rows <= 0 || cols <= 0 || rows > (int64_t{1} << 31) || cols > (int64_t{1} << 20))
    return err("{}: unsupported shape [{}, {}]", what, rows, cols);
  if (cols % spec.group_size != 0)
    return err("{}: {} columns is not a multiple of the group size {}", what, cols,
               spec.group_size);
  if (static_cast<int64_t>(n_w) != rows * cols)
    return err("{}: {} weights given for shape [{}, {}]", what, n_w, rows, cols);
  return ok_status();
}

// Packs codes [rows, cols] and per-group grids [rows, cols/group] into MLX tensors, then
// decodes them into q. The codes of a row fill whole bytes (cols % 32 == 0), so the matrix's
// bitstream is the concatenation of the rows'.
Status pack_and_decode(const GroupCoder& coder, int64_t rows, int64_t cols,
                       const std::vector<uint8_t>& codes, const std::vector<GroupGrid>& grids,
                       std::vector<uint8_t>* weight, std::vector<uint8_t>* scales,
                       std::vector<uint8_t>* biases, std::vector<float>* q) {
  *weight = pack_codes(codes, coder.spec().bits);
  if (coder.affine()) {
    std::vector<float> s(grids.size()), b(grids.size());
    for (size_t i = 0; i < grids.size(); ++i) {
      s[i] = grids[i].scale;
      b[i] = grids[i].bias;
    }
    *scales = encode_from_f32(s, coder.dtype());
    *biases = encode_from_f32(b, coder.dtype());
  } else {
    scales->resize(grids.size());
    for (size_t i = 0; i < grids.size(); ++i) (*scales)[i] = grids[i].byte;
    biases->clear();
  }
  q->resize(static_cast<size_t>(rows * cols));
  return dequantize_mlx(coder.spec(), rows, cols, *weight, coder.scale_dtype(), *scales, *biases,
                        *q);
}

// Grids of every group of w [rows, cols] (row-major), fitted on the values as they are; d
// [cols] (or empty) weights each column's error when the coder searches.
std::vector<GroupGrid> fit_all(const GroupCoder& coder, const float* w, int64_t rows, int64_t cols,
                               std::span<const float> d = {}) {
  const int64_t g = coder.spec().group_size, ng = cols / g;
  std::vector<GroupGrid> grids(static_cast<size_t>(rows * ng));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < ng; ++j)
      grids[r * ng + j] =
          coder.fit({w + r * cols + j * g, static_cast<size_t>(g)},
                    d.empty() ? d : d.subspan(static_cast<size_t>(j * g), static_cast<size_t>(g)));
  return grids;
}

bool all_of_dtype(std::span<const float> w, DType dtype) {
  for (float x : w)
    if (!std::isfinite(x) || round_to_dtype(x, dtype) != x) return false;
  return true;
}

struct Sweep {
  enum Outcome { kOk, kCholesky, kScale } outcome = kOk;
  std::vector<uint8_t> codes;    // [rows, cols], original column order
  std::vector<GroupGrid> grids;  // [rows, cols/group]
  std::vector<float> q;          // [rows, cols]: the values the error feedback used
};

// U upper triangular with UᵀU = (Hp + λI)⁻¹, in place in a [c, c] row-major; false if a
// Cholesky factorization fails.
bool inverse_cholesky(std::vector<double>* a, int64_t c) {
  const lapack_int n = static_cast<lapack_int>(c);
  if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', n, a->data(), n) != 0) return false;
  if (LAPACKE_dpotri(LAPACK_ROW_MAJOR, 'U', n, a->data(), n) != 0) return false;
  if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', n, a->data(), n) != 0) return false;
  for (int64_t i = 0; i < c; ++i) {
    const double d = (*a)[i * c + i];
    if (!(d > 0.0) || !std::isfinite(d)) return false;
    for (int64_t j = 0; j < i; ++j) (*a)[i * c + j] = 0.0;  // potri/potrf leave the lower part
  }
  return true;
}

// One GPTQ sweep over wt [cols, rows] (permuted, f64) with the inverse factor u [cols, cols].
// perm[t] is the original column of permuted column t; static_grids (if not empty) holds every
// group's grid fixed in advance.
Sweep run_sweep(const GroupCoder& coder, std::vector<double> wt, int64_t rows, int64_t cols,
                const std::vector<double>& u, const std::vector<int64_t>& perm,
                const std::vector<GroupGrid>& static_grids, int block, float scale_ceiling) {
  const int64_t gs = coder.spec().group_size, ng = cols / gs;
  Sweep s;
  s.codes.resize(static_cast<size_t>(rows * cols));
  s.q.resize(s.codes.size());
  s.grids =
      static_grids.empty() ? std::vector<GroupGrid>(static_cast<size_t>(rows * ng)) : static_grids;
  std::vector<double> e(static_cast<size_t>(block * rows));  // E [block, rows]
  std::vector<float> group(static_cast<size_t>(gs)), weight(static_cast<size_t>(gs));
  for (int64_t i1 = 0; i1 < cols; i1 += block) {
    const int64_t i2 = std::min<int64_t>(i1 + block, cols);
    for (int64_t t = i1; t < i2; ++t) {
      const int64_t col = perm[t], grp = col / gs;
      if (static_grids.empty() && col % gs == 0) {  // no permutation: t == col
        // Grid of columns t..t+gs-1 from their updated values (inside this block: gs | block).
        // A searched grid weights column j's error by 1/U_jj², GPTQ's cost of that error with
        // the later columns free to compensate.
        for (int64_t j = 0; j < gs; ++j) {
          const double ujj = u[(t + j) * cols + t + j];
          weight[j] = static_cast<float>(1.0 / (ujj * ujj));
        }
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < gs; ++j) group[j] = static_cast<float>(wt[(t + j) * rows + r]);
          const GroupGrid g = coder.fit(group, weight);
          if (GroupCoder::magnitude(g) > scale_ceiling || !std::isfinite(g.scale)) {
            s.outcome = Sweep::kScale;
            return s;
          }
          s.grids[r * ng + grp] = g;
        }
      }
      const double* w = &wt[t * rows];
      const double d = u[t * cols + t];
      double* et = &e[(t - i1) * rows];
      for (int64_t r = 0; r < rows; ++r) {
        const GroupGrid& g = s.grids[r * ng + grp];
        const uint8_t c = coder.code(static_cast<float>(w[r]), g);
        const float q = coder.value(c, g);
        s.codes[r * cols + col] = c;
        s.q[r * cols + col] = q;
        et[r] = (w[r] - static_cast<double>(q)) / d;
      }
      // Error feedback inside the block: W[:, t2] -= e · U[t, t2] for t < t2 < i2.
      for (int64_t t2 = t + 1; t2 < i2; ++t2) {
        const double f = u[t * cols + t2];
        double* w2 = &wt[t2 * rows];
        for (int64_t r = 0; r < rows; ++r) w2[r] -= f * et[r];
      }
    }
    // Lazy batch update: WT[i2:, :] -= U[i1:i2, i2:]ᵀ · E[0:i2-i1, :]
    if (i2 < cols)
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(cols - i2),
                  static_cast<int>(rows), static_cast<int>(i2 - i1), -1.0, &u[i1 * cols + i2],
                  static_cast<int>(cols), e.data(), static_cast<int>(rows), 1.0, &wt[i2 * rows],
                  static_cast<int>(rows));
  }
  return s;
}

}  // namespace

double gptq_proxy_loss(std::span<const float> w, std::span<const float> q, int64_t rows,
                       int64_t cols, std::span<const double> h) {
  constexpr int64_t kChunk = 256;  // rows per dgemm, bounding the f64 scratch
  std::vector<double> d(static_cast<size_t>(std::min(rows, kChunk) * cols)), dh(d.size());
  double loss = 0.0;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t n = std::min(kChunk, rows - r0);
    for (int64_t i = 0; i < n * cols; ++i)
      d[i] = static_cast<double>(w[r0 * cols + i]) - static_cast<double>(q[r0 * cols + i]);
    // DH [n, cols] = D [n, cols] · H [cols, cols]
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n),
                static_cast<int>(cols), static_cast<int>(cols), 1.0, d.data(),
                static_cast<int>(cols), h.data(), static_cast<int>(cols), 0.0, dh.data(),
                static_cast<int>(cols));
    for (int64_t i = 0; i < n * cols; ++i) loss += d[i] * dh[i];
  }
  return loss;
}

Result<RtnResult> rtn_quantize(std::span<const float> w, int64_t rows, int64_t cols,
                               const QuantSpec& spec, DType dtype, GridChoice grid,
                               std::span<const float> d) {
  TQ_CHECK_OK(check_shape(spec, dtype, rows, cols, w.size()));
  if (!d.empty() && static_cast<int64_t>(d.size()) != cols)
    return err("rtn {}: {} column weights for {} columns", quant_spec_str(spec), d.size(), cols);
  const GroupCoder coder(spec, dtype, grid);
  const bool search = grid == GridChoice::kSearch && coder.affine();
  RtnResult out;
  if (all_of_dtype(w, dtype) && !search) {
    TQ_CHECK_OK(quantize_mlx(spec, rows, cols, w, dtype, &out.weight, &out.scales, &out.biases));
    out.dequantized.resize(w.size());
    TQ_CHECK_OK(dequantize_mlx(spec, rows, cols, out.weight, coder.scale_dtype(), out.scales,
                               out.biases, out.dequantized));
  } else {
    const std::vector<GroupGrid> grids = fit_all(coder, w.data(), rows, cols, d);
    std::vector<uint8_t> codes(w.size());
    const int64_t gs = spec.group_size;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k)
        codes[r * cols + k] = coder.code(w[r * cols + k], grids[r * (cols / gs) + k / gs]);
    TQ_CHECK_OK(pack_and_decode(coder, rows, cols, codes, grids, &out.weight, &out.scales,
                                &out.biases, &out.dequantized));
  }
  // The largest decoded min/max scale (the divergence ceiling's base, whatever the grid choice).
  const std::vector<GroupGrid> grids = fit_all(GroupCoder(spec, dtype), w.data(), rows, cols);
  for (const GroupGrid& g : grids) out.max_scale = std::max(out.max_scale, coder.magnitude(g));
  return out;
}

Result<GptqResult> gptq_quantize(std::span<const float> w, int64_t rows, int64_t cols,
                                 std::span<const double> h, const QuantSpec& spec, DType dtype,
                                 const GptqOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  TQ_CHECK_OK(check_shape(spec, dtype, rows, cols, w.size()));
  const std::string what = "gptq " + quant_spec_str(spec);
  if (static_cast<int64_t>(h.size()) != cols * cols)
    return err("{}: Hessian has {} values, expected {}x{}", what, h.size(), cols, cols);
  if (!(opt.damp > 0.0) || !std::isfinite(opt.damp) || !(opt.max_damp >= opt.damp) ||
      !std::isfinite(opt.max_damp) || opt.block < 1 || !(opt.scale_guard > 0.0))
    return err("{}: bad options (damp {}, max damp {}, block {}, scale guard {})", what, opt.damp,
               opt.max_damp, opt.block, opt.scale_guard);
  for (size_t i = 0; i < w.size(); ++i)
    if (!std::isfinite(w[i]))
      return err("{}: weight [{}, {}] is {}", what, i / cols, i % cols, w[i]);
  for (size_t i = 0; i < h.size(); ++i)
    if (!std::isfinite(h[i]))
      return err("{}: Hessian [{}, {}] is {}", what, i / cols, i % cols, h[i]);
  for (int64_t j = 0; j < cols; ++j)
    if (h[j * cols + j] < 0.0)
      return err("{}: Hessian diagonal [{}] = {} is negative", what, j, h[j * cols + j]);

  const GroupCoder coder(spec, dtype, opt.grid);
  GptqResult res;
  // The RTN reference (loss guard and fallback) takes the same grid choice, weighted by H_kk.
  std::vector<float> hdiag(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) hdiag[j] = static_cast<float>(h[j * cols + j]);
  TQ_TRY(RtnResult rtn, rtn_quantize(w, rows, cols, spec, dtype, opt.grid,
                                     opt.grid == GridChoice::kSearch ? std::span<const float>(hdiag)
                                                                     : std::span<const float>()));
  res.rtn_loss = gptq_proxy_loss(w, rtn.dequantized, rows, cols, h);

  // Dead inputs: zero the weight column, set H_jj = 1 (FORMATS.md §5.2 step 2).
  std::vector<float> w0(w.begin(), w.end());
  std::vector<double> hd(h.begin(), h.end());
  for (int64_t j = 0; j < cols; ++j) {
    if (hd[j * cols + j] != 0.0) continue;
    ++res.dead_columns;
    hd[j * cols + j] = 1.0;
    for (int64_t r = 0; r < rows; ++r) w0[r * cols + j] = 0.0f;
  }
  const auto finish_rtn = [&]() {
    res.fallback = true;
    res.weight = std::move(rtn.weight);
    res.scales = std::move(rtn.scales);
    res.biases = std::move(rtn.biases);
    res.dequantized = std::move(rtn.dequantized);
    res.proxy_loss = res.rtn_loss;
    res.sweep_loss = res.rtn_loss;
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::move(res);
  };
  // No calibration signal at all: zeroing every column would be "optimal" for a zero H, but
  // the module would lose all its weights; keep RTN.
  if (res.dead_columns == cols) return finish_rtn();
  const bool static_groups = opt.static_groups || opt.act_order;
  std::vector<float> hdiag0(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) hdiag0[j] = static_cast<float>(hd[j * cols + j]);
  const std::vector<GroupGrid> static_grids =
      static_groups ? fit_all(coder, w0.data(), rows, cols, hdiag0) : std::vector<GroupGrid>{};

  // Act-order: columns by descending H_jj (stable), H permuted on both sides.
  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  if (opt.act_order)
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return hd[a * cols + a] > hd[b * cols + b]; });
  std::vector<double> hp(hd.size()), wt(static_cast<size_t>(rows * cols));
  double mean_diag = 0.0;
  for (int64_t i = 0; i < cols; ++i) {
    for (int64_t j = 0; j < cols; ++j) hp[i * cols + j] = hd[perm[i] * cols + perm[j]];
    mean_diag += hp[i * cols + i];
    for (int64_t r = 0; r < rows; ++r) wt[i * rows + r] = w0[r * cols + perm[i]];
  }
  mean_diag /= static_cast<double>(cols);

  const int64_t gs = spec.group_size;
  const int block = static_cast<int>(std::max<int64_t>(gs, opt.block / gs * gs));
  const float ceiling = static_cast<float>(opt.scale_guard) * rtn.max_scale;
  for (int level = 0;; ++level) {
    const double frac = opt.damp * std::pow(10.0, level);  // not a running product: no drift
    if (frac > opt.max_damp * (1.0 + 1e-9)) break;
    ++res.attempts;
    std::vector<double> a = hp;
    const double lambda = frac * mean_diag;
    for (int64_t i = 0; i < cols; ++i) a[i * cols + i] += lambda;
    if (!inverse_cholesky(&a, cols)) {
      ++res.cholesky_failures;
      continue;
    }
    Sweep s = run_sweep(coder, wt, rows, cols, a, perm, static_grids, block, ceiling);
    if (s.outcome == Sweep::kScale) {
      ++res.scale_divergences;
      continue;
    }
    GptqResult cand;
    TQ_CHECK_OK(pack_and_decode(coder, rows, cols, s.codes, s.grids, &cand.weight, &cand.scales,
                                &cand.biases, &cand.dequantized));
    for (size_t i = 0; i < s.q.size(); ++i)
      if (f32_to_bits(s.q[i]) != f32_to_bits(cand.dequantized[i]))
        return err("{}: internal: element [{}, {}] decodes to {} but the sweep used {}", what,
                   i / cols, i % cols, cand.dequantized[i], s.q[i]);
    double loss = gptq_proxy_loss(w, cand.dequantized, rows, cols, h);
    cand.sweep_loss = loss;
    if (opt.refit && coder.affine() && loss <= res.rtn_loss) {
      TQ_TRY(RefitStats rs, refit_affine_grids(coder, w, rows, cols, h, s.codes, &s.grids));
      if (rs.rows_refit > 0) {
        GptqResult refit;
        TQ_CHECK_OK(pack_and_decode(coder, rows, cols, s.codes, s.grids, &refit.weight,
                                    &refit.scales, &refit.biases, &refit.dequantized));
        const double refit_loss = gptq_proxy_loss(w, refit.dequantized, rows, cols, h);
        if (refit_loss < loss) {
          refit.sweep_loss = loss;
          refit.refit_rows = rs.rows_refit;
          cand = std::move(refit);
          loss = refit_loss;
        }
      }
    }
    if (!(loss <= res.rtn_loss)) {
      ++res.loss_divergences;
      continue;
    }
    res.weight = std::move(cand.weight);
    res.scales = std::move(cand.scales);
    res.biases = std::move(cand.biases);
    res.dequantized = std::move(cand.dequantized);
    res.proxy_loss = loss;
    res.sweep_loss = cand.sweep_loss;
    res.refit_rows = cand.refit_rows;
    res.damp = frac;
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  }
  return finish_rtn();
}

}  // namespace tq
