// Prefill products on Intel AMX (Sapphire Rapids and later): affine weights × two-plane int8
// activations (ActQ8's rule, x ≈ d·(q + r/256), on blocks of 64) on tile multiplies (tdpbusd:
// u8 codes × s8 activations, 16 rows × 16 tokens × 64 k per instruction). Codes are unpacked to
// bytes per strip of 16 rows (8-bit codes are used where they lie); each 64-block's integer sums
// are scaled as in the scalar reference packed_matmul_tiles_ref, which the kernel equals up to
// f32 rounding. Highway has no AMX, so this file uses the intrinsics; chosen at run time.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/packed_matmul.h"

namespace tq {

// Activations as AMX B tiles: per 16-token block and 64-block of k, the 16 × 64 values as 16
// rows of 16 tokens × 4 consecutive k (the order tdpbusd reads), tokens past n zero; d / 256
// and the block sums (of x as quantized) per token beside them.
struct ActTiles {
  int64_t n = 0, cols = 0, blocks = 0;  // cols % 64 == 0, blocks = ceil(n / 16)
  std::vector<int8_t> q, r;             // [blocks][cols / 64][16][64]
  std::vector<float> dv, sum;           // [blocks][cols / 64][16]
};
// Sizes `out` for x[n, cols] and zeroes the tokens past n.
void act_tiles_init(int64_t n, int64_t cols, ActTiles* out);
// Quantizes tokens [t0, t1) of x[n, cols] by quantize_block_q8 (len 64; AVX-512 where AMX is,
// bit for bit) into `out`, sized by act_tiles_init; disjoint ranges may run on different threads.
void quantize_act_tiles(const float* x, int64_t t0, int64_t t1, ActTiles* out);
// Value (q, r) of token t, column k, read back from the tiles.
int8_t act_tile_q(const ActTiles& xt, int64_t t, int64_t k);
int8_t act_tile_r(const ActTiles& xt, int64_t t, int64_t k);

// Whether this CPU has AMX-INT8 and the OS granted this process the tile state (asked once, on
// the first call; RuntimeOptions::amx can still keep the runtime off it).
bool amx_available();
// Whether the AMX kernel takes this matrix: affine, group a multiple of 64, rows % 16 == 0.
bool amx_supported(const PackedMatrix& w);
// y[t * ldy + r] for t < xt.n, r0 <= r < r1 (r0, r1 multiples of 16). Only where amx_available()
// and amx_supported(w).
void packed_matmul_amx(const PackedMatrix& w, const ActTiles& xt, float* y, int64_t ldy, int64_t r0,
                       int64_t r1);
// Its scalar reference: per 64-block, integer Σ code·(256·q + r) scaled by s·d/256, plus b·sum.
void packed_matmul_tiles_ref(const PackedMatrix& w, const ActTiles& xt, float* y, int64_t ldy,
                             int64_t r0, int64_t r1);

}  // namespace tq
