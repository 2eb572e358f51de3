// GPTQ (Frantar et al. 2022) for one matrix, emitting MLX-quantized tensors (FORMATS.md §5.2).
//
// Proxy loss (reported for GPTQ and RTN alike): L(Q) = tr((W − Q) H (W − Q)ᵀ), with H the
// Hessian as given (undamped; dead columns contribute nothing) and Q the decoded quantized
// matrix. With H = (2/n)XᵀX (quant/hessian.h) this is twice the mean squared output error
// per calibration token.
//
// Guards (seed "v3 fixes"): damping λ = damp·mean(diag H) escalates ×10 per attempt while the
// fraction stays <= max_damp (0.01, 0.1, 1, 10 by default) when the Cholesky factorization
// fails or the sweep diverges: some group scale above scale_guard × the largest RTN group
// scale of the matrix, or a proxy loss above RTN's. When every attempt fails the result is
// the RTN quantization (fallback = true), so GPTQ is never worse than RTN in proxy loss.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "quant/grid_search.h"
#include "tensor/dtype.h"

namespace tq {

struct GptqOptions {
  int block = 128;             // lazy-batch block width, rounded down to a multiple of the group
  double damp = 0.01;          // initial damping fraction of mean(diag H)
  double max_damp = 10.0;      // escalation stops after the attempt at this fraction
  bool act_order = false;      // columns by descending H_ii; implies static groups
  bool static_groups = false;  // group grids fixed from W (after dead columns) before the sweep
  double scale_guard = 4.0;    // divergence: |group scale| > scale_guard · RTN's largest
  // Affine grids: kSearch fits each group (and the RTN reference) to minimise the error
  // weighted by 1/[H⁻¹]_kk of the remaining columns (static groups: H_kk); refit solves each
  // row's scales and biases against H once the codes are fixed (docs/GPTQ.md, "Grids").
  GridChoice grid = GridChoice::kMinMax;
  bool refit = false;
  // The layer driver's choice (quant/asym_target.h): fit each matrix to the float model's
  // output instead of its own on the quantized model's input. gptq_quantize ignores it.
  bool asym = false;
};

struct GptqResult {
  // MLX tensors exactly as quantize_mlx lays them out: weight (U32 words as bytes), scales
  // ([rows, cols/group] of dtype for affine, U8 for fp modes), biases (affine only).
  std::vector<uint8_t> weight, scales, biases;
  std::vector<float> dequantized;  // Q [rows, cols]: the decoded tensors, used in the loss
  double proxy_loss = 0.0;         // L(Q) of the returned tensors
  double rtn_loss = 0.0;           // L(RTN(W))
  double damp = 0.0;               // damping fraction of the returned GPTQ attempt (0 if RTN)
  int attempts = 0;                // damping levels tried
  int cholesky_failures = 0;
  int scale_divergences = 0;
  int loss_divergences = 0;
  int dead_columns = 0;
  double sweep_loss = 0.0;  // L(Q) before the grid refit (= proxy_loss without one)
  int64_t refit_rows = 0;   // rows whose grids the refit changed
  bool fallback = false;    // every attempt failed: the tensors are RTN's
  double seconds = 0.0;
};

// Quantizes w [rows, cols] (f32, finite) given h [cols, cols] (symmetric, finite, positive
// semi-definite as (2/n)XᵀX is), for spec (affine bits 1..8 except 7, groups 32/64/128;
// mxfp4, nvfp4, mxfp8). dtype is the weight's storage dtype (F32/F16/BF16): affine scales and
// biases are stored in it and rounded to it before any code or error is computed.
Result<GptqResult> gptq_quantize(std::span<const float> w, int64_t rows, int64_t cols,
                                 std::span<const double> h, const QuantSpec& spec, DType dtype,
                                 const GptqOptions& opt = {});

// Round-to-nearest of w with the same grids, as tq convert writes it: quantize_mlx (bit-exact
// mx.quantize) when every value is one of dtype, else the grid with codes chosen against the
// stored scale and bias. dequantized receives the decoded matrix.
struct RtnResult {
  std::vector<uint8_t> weight, scales, biases;
  std::vector<float> dequantized;
  float max_scale = 0.0f;  // largest |decoded group scale| (the divergence ceiling's base)
};
// With GridChoice::kSearch the affine grids minimise each group's squared error, weighted by
// d [cols] when given (e.g. the Hessian diagonal), else plain.
Result<RtnResult> rtn_quantize(std::span<const float> w, int64_t rows, int64_t cols,
                               const QuantSpec& spec, DType dtype,
                               GridChoice grid = GridChoice::kMinMax,
                               std::span<const float> d = {});

// tr((W − Q) H (W − Q)ᵀ) in f64 (w, q [rows, cols]; h [cols, cols]).
double gptq_proxy_loss(std::span<const float> w, std::span<const float> q, int64_t rows,
                       int64_t cols, std::span<const double> h);

}  // namespace tq
