// Matrix products on packed weights, used in place: y[t, r] = Σ_k x[t, k] · W[r, k].
//
// Per-format kernel table (docs/STYLE.md habit 4). Every entry has a scalar reference
// (packed_matmul_ref / packed_matmul_q8_ref) and SIMD versions compiled once per ISA with
// Highway and chosen at run time (HWY_DYNAMIC_DISPATCH: AVX2, AVX-512, AVX-512 VNNI = AVX3_DL).
//
//   format           | decode (n = 1), f32 act.         | prefill (n > 1), f32 act. | int8 act.
//   (q8) f32 / f16 / bf16 | 4 rows per pass, x loaded once   | rows decoded to f32 strip | - affine
//   4-bit     | fused: nibbles -> f32, x split   | strip + 4x3 FMA tile      | VNNI dpbusd
//   (AVX3_DL),
//                    | even/odd, s·Σqx + b·Σx per group |                           | maddubs
//                    (AVX2, AVX3)
//   affine 8-bit     | fused: bytes -> f32              | strip + tile              | VNNI dpbusd
//   (AVX3_DL) affine 2/3/5/6   | row decoded to f32, then dot     | strip + tile              | -
//   mxfp4/nvfp4/mxfp8| row decoded to f32, then dot     | strip + tile              | -
//
// Rows [r0, r1) only, so a thread pool can split the work by output rows.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/packed_matrix.h"

namespace tq {

// y[t * ldy + r] = Σ_k x[t * w.cols + k] · W[r, k] for t < n, r0 <= r < r1.
void packed_matmul(const PackedMatrix& w, const float* x, int64_t n, float* y, int64_t ldy,
                   int64_t r0, int64_t r1);
// Row r of W decoded to f32 (cols values), SIMD; equals packed_decode_row_ref up to rounding.
void packed_decode_row(const PackedMatrix& w, int64_t r, float* out);
// The scalar reference: W decoded by packed_weight, products summed in double.
void packed_matmul_ref(const PackedMatrix& w, const float* x, int64_t n, float* y, int64_t ldy,
                       int64_t r0, int64_t r1);

// Activations quantized to int8 per block of 32 values: x ≈ d · q, d = max|x| / 127.
struct ActQ8 {
  int64_t n = 0, cols = 0;  // cols % 32 == 0
  std::vector<int8_t> q;    // [n, cols] natural order
  // [n, cols] in the order of 4-bit codes' nibbles: each 128-chunk of two 64-halves A, B as
  // (A even k, B even k, A odd k, B odd k); a last 64-chunk as (even k, odd k); a last
  // 32-block as is.
  std::vector<int8_t> q4;
  std::vector<float> d;    // [n, cols / 32]
  std::vector<float> dv;   // [n, cols / 64 * 8]: d[2c] four times, then d[2c+1] four times
  std::vector<float> dv8;  // [n, cols / 64 * 16]: d[2c] eight times, then d[2c+1] eight
  std::vector<float> sum;  // [n, cols / 32] Σ x of the block, from the f32 values
};
void quantize_act_q8(const float* x, int64_t n, int64_t cols, ActQ8* out);

// Whether the dispatched ISA has an integer dot-product kernel for this matrix.
bool packed_q8_supported(const PackedMatrix& w);
// y as packed_matmul, from int8 activations (only where packed_q8_supported).
void packed_matmul_q8(const PackedMatrix& w, const ActQ8& xq, float* y, int64_t ldy, int64_t r0,
                      int64_t r1);
// Its scalar reference (affine only): per block, integer Σ q·xq, scaled by s·d; plus b·Σx.
void packed_matmul_q8_ref(const PackedMatrix& w, const ActQ8& xq, float* y, int64_t ldy, int64_t r0,
                          int64_t r1);

// The dispatched ISA's name ("AVX3_DL", "AVX2", ...) for logs and bench reports.
const char* packed_kernel_isa();

}  // namespace tq
