// Matrix products on packed weights, used in place: y[t, r] = Σ_k x[t, k] · W[r, k].
//
// Per-format kernel table (docs/STYLE.md habit 4). Every entry has a scalar reference
// (packed_matmul_ref / packed_matmul_q8_ref) and SIMD versions compiled once per ISA with
// Highway and chosen at run time (HWY_DYNAMIC_DISPATCH: AVX2, AVX-512, AVX-512 VNNI = AVX3_DL).
//
//   format         | decode (n = 1), f32 act.      | prefill, f32 act.  | int8 act. (ActQ8)
//   f32/f16/bf16   | 4 rows per pass, x loaded once| decoded strip +    | -
//   affine 4-bit   | nibbles -> f32, x split even/ |   4x3 FMA tile     | dpbusd (AVX3_DL),
//                  |   odd, s·Σqx + b·Σx per group |                    |   maddubs (AVX2/3)
//   affine 8-bit   | bytes -> f32                  |                    | dpbusd (AVX3_DL)
//   affine 2/3/5/6 | row decoded to f32, then dot  |                    | vpermb+vpmultishiftqb
//   mxfp4/nvfp4    | row decoded to f32, then dot  |                    |   + dpbusd (AVX3_DL),
//                  |                               |                    |   pshufb+pmullw+
//                  |                               |                    |   pmaddwd (AVX2/3)
//   mxfp8          | row decoded to f32, then dot  |                    | -
//   affine, g%64==0| (prefill of 16+ tokens on CPUs with AMX: kernels/amx_matmul.h, tdpbusd tiles)
//   affine 2/3/4   | prepacked (pack_lanes, AVX3_DL): every token count on the lanes kernel
//
// Rows [r0, r1) only, so a thread pool can split the work by output rows.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/packed_matrix.h"

namespace tq {

// Which kernels a batch of tokens takes: chosen by its size (kAuto), the per-token kernels at
// every size, or the batch kernels (tiles) from one token on. With the last two, a token's row of
// y does not depend on how many tokens share the call. 8-bit affine codes give every token the
// same bits under all three (the tiles keep the per-token kernel's sums), so they take the tiles
// from two tokens on whatever the choice.
enum class BatchKernel : uint8_t { kAuto, kPerToken, kTiles };

// y[t * ldy + r] = Σ_k x[t * w.cols + k] · W[r, k] for t < n, r0 <= r < r1.
void packed_matmul(const PackedMatrix& w, const float* x, int64_t n, float* y, int64_t ldy,
                   int64_t r0, int64_t r1, BatchKernel kernel = BatchKernel::kAuto);
// Row r of W decoded to f32 (cols values), SIMD; equals packed_decode_row_ref up to rounding.
void packed_decode_row(const PackedMatrix& w, int64_t r, float* out);
// The scalar reference: W decoded by packed_weight, products summed in double.
void packed_matmul_ref(const PackedMatrix& w, const float* x, int64_t n, float* y, int64_t ldy,
                       int64_t r0, int64_t r1);

// Activations as two int8 planes per block of 32 values: x ≈ d · (q + r / 256), d = max|x| / 127,
// q = round(x / d), r = round(256 · (x / d - q)) (|r| <= 127). Integer dot products take
// both planes (Σ code·q · 256 + Σ code·r in int32), so the products keep ~16-bit precision
// at the cost of a second pass over the same weight registers: plain int8 (q alone) moved
// SmolLM2's PPL by 0.3-0.5%, over the 0.2% the runtime allows.
struct ActQ8 {
  int64_t n = 0, cols = 0;   // cols % 32 == 0
  std::vector<int8_t> q, r;  // [n, cols] natural order
  // [n, cols] in the order of 4-bit codes' nibbles: each 128-chunk of two 64-halves A, B as
  // (A even k, B even k, A odd k, B odd k); a last 64-chunk as (even k, odd k); a last
  // 32-block as is.
  std::vector<int8_t> q4, r4;
  std::vector<float> d;    // [n, cols / 32]
  std::vector<float> dv;   // [n, cols / 64 * 8]: d[2c] / 256 four times, then d[2c+1] / 256
  std::vector<float> dv8;  // [n, cols / 64 * 16]: d[2c] / 256 eight times, then d[2c+1] / 256
  // [n, cols / 32] Σ of the block's x as quantized (d · Σ (q + r/256)): the bias terms must see
  // the same x as the codes, or the zero-point b multiplies the rounding errors.
  std::vector<float> sum;
};
void quantize_act_q8(const float* x, int64_t n, int64_t cols, ActQ8* out);
// The same in two steps, so that token ranges can be quantized on several threads: sizes for
// n tokens, then tokens [t0, t1) of x[n, cols].
void act_q8_init(int64_t n, int64_t cols, ActQ8* out);
// nibbles = false leaves q4 and r4 unset: only the per-token kernels of 4-bit codes read them
// (packed_q8_reads_nibbles).
void quantize_act_q8_tokens(const float* x, int64_t t0, int64_t t1, ActQ8* out,
                            bool nibbles = true);
// One block of `len` values: its two planes, d and the sum of the block as quantized (ActQ8's
// rule; ActQ8 uses len 32, the AMX tiles 64).
void quantize_block_q8(const float* x, int len, int8_t* q, int8_t* r, float* d, float* sum);
// The same on nb consecutive blocks (q, r: nb * len; d, sum: nb), in SIMD, bit for bit.
void quantize_blocks_q8(const float* x, int len, int64_t nb, int8_t* q, int8_t* r, float* d,
                        float* sum);

// Whether the dispatched ISA has an integer dot-product kernel for this matrix.
bool packed_q8_supported(const PackedMatrix& w);
// Whether packed_matmul_q8 runs batches of 16+ tokens of this matrix as register tiles (codes
// unpacked once per strip of rows, 4 rows × 4 tokens per tile: AVX3_DL, columns % 64 == 0).
bool packed_q8_tiles_supported(const PackedMatrix& w);
// Whether packed_matmul_q8 of n tokens of this matrix with this choice reads ActQ8's q4 / r4.
bool packed_q8_reads_nibbles(const PackedMatrix& w, int64_t n, BatchKernel kernel);
// y as packed_matmul, from int8 activations (only where packed_q8_supported). `parts`: the rows
// of [r0, r1) are visited from several parts of the range at once (what the runtime uses: a
// core keeps more misses in flight); false: strips of adjacent rows. The same results.
void packed_matmul_q8(const PackedMatrix& w, const ActQ8& xq, float* y, int64_t ldy, int64_t r0,
                      int64_t r1, bool parts = true, BatchKernel kernel = BatchKernel::kAuto);
// Its scalar reference: per block, integer Σ v·(256·q + r), scaled by s·d/256, plus b·sum
// (affine: v the code; mxfp4/nvfp4: v = 2·E2M1 and s half the scale, no b).
void packed_matmul_q8_ref(const PackedMatrix& w, const ActQ8& xq, float* y, int64_t ldy, int64_t r0,
                          int64_t r1);

// w's codes, scales and biases in the order the lanes kernel (AVX3_DL, 2/3/4-bit affine) would
// unpack and transpose them to on every call, in strips of 32 rows (the last padded with its
// last row): the codes nibble-packed (16 · cols bytes a strip), then each strip's scales and
// biases as [group][32 rows] in their dtype; as many bytes as w's at 4 bits (4/3 and 2x the
// codes' bytes at 3 and 2). Empty where that kernel does
// not take w. With use_lanes every batch size, one token too, runs on the lanes with nothing
// unpacked per call: the same bits at every size, and a batch's extra tokens cheap.
std::vector<uint8_t> pack_lanes(const PackedMatrix& w);
// Points w.lanes and w.lane_scales into `packed` (pack_lanes(w), kept alive by the caller).
void use_lanes(PackedMatrix& w, const std::vector<uint8_t>& packed);

// The dispatched ISA's name ("AVX3_DL", "AVX2", ...) for logs and bench reports.
const char* packed_kernel_isa();
// The dispatched ISA's integer dot-product kernels: "avx512-vnni" (every affine width, mxfp4,
// nvfp4), "avx512/avx2 (no 8-bit)", "avx2 (no 8-bit)" or "none" (float path only).
const char* packed_int8_path();

}  // namespace tq
