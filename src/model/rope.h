// RoPE inverse frequencies as mlx-lm's initialize_rope builds them (FORMATS.md §7.2).
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.h"
#include "model/model_config.h"

namespace tq {

// inv_freq[i] for i < h/2 (h = rotary_dims: head_dim but for partial rotary), so that pair i
// turns by pos · inv_freq[i]: base^(-2i/h),
// times 1/factor for "linear", with llama3's per-wavelength rescaling for "llama3". Other
// scaling types (dynamic, yarn, longrope, ...) are an error: the runtime does not do them.
Result<std::vector<double>> rope_inv_freq(const ModelConfig& cfg);

// cos, sin [n, rotary_dims / 2] of positions p0 .. p0 + n - 1.
void rope_table(const std::vector<double>& inv_freq, int64_t p0, int64_t n, float* cos, float* sin);
// RoPE on rows [r0, r1) of q [rows, qd] and k [rows, kvd]: every head of row r turns by table
// row r % n (rows of several sequences of n share the table).
void rope_rows(const ModelConfig& c, const float* cos, const float* sin, int64_t n, int64_t r0,
               int64_t r1, float* q, float* k);

}  // namespace tq
