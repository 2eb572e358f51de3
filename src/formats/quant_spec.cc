#include "formats/quant_spec.h"

#include <fmt/format.h>

namespace tq {

std::string_view quant_mode_name(QuantMode m) {
  switch (m) {
    case QuantMode::kAffine:
      return "affine";
    case QuantMode::kMxfp4:
      return "mxfp4";
    case QuantMode::kNvfp4:
      return "nvfp4";
    case QuantMode::kMxfp8:
      return "mxfp8";
  }
  return "unknown";
}

std::optional<QuantMode> quant_mode_from_name(std::string_view s) {
  for (QuantMode m : {QuantMode::kAffine, QuantMode::kMxfp4, QuantMode::kNvfp4, QuantMode::kMxfp8})
    if (quant_mode_name(m) == s) return m;
  return std::nullopt;
}

QuantSpec default_spec_for_mode(QuantMode m) {
  switch (m) {
    case QuantMode::kAffine:
      return {QuantMode::kAffine, 4, 64};
    case QuantMode::kMxfp4:
      return {QuantMode::kMxfp4, 4, 32};
    case QuantMode::kNvfp4:
      return {QuantMode::kNvfp4, 4, 16};
    case QuantMode::kMxfp8:
      return {QuantMode::kMxfp8, 8, 32};
  }
  return {};
}

Status validate_quant_spec(const QuantSpec& s) {
  if (s.mode == QuantMode::kAffine) {
    // mlx 0.32 accepts bits 1..6 and 8 (7 is rejected) and groups 32/64/128.
    bool bits_ok = (s.bits >= 1 && s.bits <= 6) || s.bits == 8;
    if (!bits_ok)
      return err("affine quantization does not support {} bits (supported: 1, 2, 3, 4, 5, 6, 8)",
                 s.bits);
    if (s.group_size != 32 && s.group_size != 64 && s.group_size != 128)
      return err("affine quantization does not support group size {} (supported: 32, 64, 128)",
                 s.group_size);
    return ok_status();
  }
  if (s.mode != QuantMode::kMxfp4 && s.mode != QuantMode::kNvfp4 && s.mode != QuantMode::kMxfp8)
    return err("unknown quantization mode {}", static_cast<int>(s.mode));
  QuantSpec want = default_spec_for_mode(s.mode);
  if (s.bits != want.bits)
    return err("{} quantization requires {} bits, got {}", quant_mode_name(s.mode), want.bits,
               s.bits);
  if (s.group_size != want.group_size)
    return err("{} quantization requires group size {}, got {}", quant_mode_name(s.mode),
               want.group_size, s.group_size);
  return ok_status();
}

std::string quant_spec_str(const QuantSpec& s) {
  if (s.mode != QuantMode::kAffine && s == default_spec_for_mode(s.mode))
    return std::string(quant_mode_name(s.mode));
  return fmt::format("{} {}-bit g{}", quant_mode_name(s.mode), s.bits, s.group_size);
}

bool quant_mode_has_biases(QuantMode m) { return m == QuantMode::kAffine; }

double quant_bits_per_weight(const QuantSpec& s, int scale_bytes) {
  if (s.group_size <= 0) return 0.0;
  // Affine stores a scale and a bias per group; fp modes one 8-bit scale per group.
  double overhead_bits = quant_mode_has_biases(s.mode) ? 2.0 * scale_bytes * 8 : 8.0;
  return s.bits + overhead_bits / s.group_size;
}

}  // namespace tq
