// RoPE inverse frequencies as mlx-lm's initialize_rope builds them (FORMATS.md §7.2).
#pragma once

#include <vector>

#include "base/result.h"
#include "model/model_config.h"

namespace tq {

// inv_freq[i] for i < head_dim/2, so that pair i turns by pos · inv_freq[i]: base^(-2i/h),
// times 1/factor for "linear", with llama3's per-wavelength rescaling for "llama3". Other
// scaling types (dynamic, yarn, longrope, ...) are an error: the runtime does not do them.
Result<std::vector<double>> rope_inv_freq(const ModelConfig& cfg);

}  // namespace tq
