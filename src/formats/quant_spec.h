// QuantSpec: how one matrix is quantized in an MLX checkpoint (FORMATS.md §2-4).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace tq {

enum class QuantMode : uint8_t { kAffine, kMxfp4, kNvfp4, kMxfp8 };

struct QuantSpec {
  QuantMode mode = QuantMode::kAffine;
  int bits = 4;
  int group_size = 64;
  bool operator==(const QuantSpec&) const = default;
};

std::string_view quant_mode_name(QuantMode m);  // "affine", "mxfp4", "nvfp4", "mxfp8"
std::optional<QuantMode> quant_mode_from_name(std::string_view s);
// mlx-lm defaults for a mode when a per-module dict omits bits/group_size.
QuantSpec default_spec_for_mode(QuantMode m);
// Checks the MLX-supported combinations: affine bits {1,2,3,4,5,6,8} x group {32,64,128}
// (mlx 0.32 accepts 1-bit affine); mxfp4 4/32, nvfp4 4/16, mxfp8 8/32.
Status validate_quant_spec(const QuantSpec& s);
std::string quant_spec_str(const QuantSpec& s);  // "affine 4-bit g64", "mxfp4"
bool quant_mode_has_biases(QuantMode m);         // only affine stores .biases
// Stored bits per weight including scales (and biases) at the given scale dtype size in bytes:
// affine = bits + 2*scale_bytes*8/group; fp modes = bits + 8/group (scale_bytes is ignored).
double quant_bits_per_weight(const QuantSpec& s, int scale_bytes);

}  // namespace tq
