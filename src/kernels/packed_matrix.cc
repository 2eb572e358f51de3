#include "kernels/packed_matrix.h"

#include <cstring>

#include <fmt/format.h>

#include "formats/mlx_quant.h"

namespace tq {

namespace {

Status check_size(std::string_view what, std::span<const uint8_t> s, int64_t rows, int64_t per_row,
                  const std::string& name) {
  int64_t n = 0;
  if (__builtin_mul_overflow(rows, per_row, &n)) return err("{}: {} is too large", name, what);
  if (static_cast<int64_t>(s.size()) != n)
    return err("{}: {} has {} bytes, expected {}", name, what, s.size(), n);
  return ok_status();
}

}  // namespace

uint64_t PackedMatrix::bytes() const {
  uint64_t b = static_cast<uint64_t>(rows) * static_cast<uint64_t>(row_bytes());
  if (quantized()) {
    uint64_t per =
        static_cast<uint64_t>(rows) * static_cast<uint64_t>(groups()) * dtype_size(scale_dtype);
    b += per * (biases != nullptr ? 2 : 1);
  }
  return b;
}

Result<PackedMatrix> make_float_matrix(DType dtype, int64_t rows, int64_t cols,
                                       std::span<const uint8_t> data) {
  PackedMatrix m;
  switch (dtype) {
    case DType::kF32:
      m.format = WeightFormat::kF32, m.bits = 32;
      break;
    case DType::kF16:
      m.format = WeightFormat::kF16, m.bits = 16;
      break;
    case DType::kBF16:
      m.format = WeightFormat::kBF16, m.bits = 16;
      break;
    default:
      return err("packed matrix: dtype {} is not a float weight type", dtype_name(dtype));
  }
  if (rows < 0 || cols < 0 || cols > (int64_t{1} << 40))
    return err("packed matrix: bad shape [{}, {}]", rows, cols);
  m.rows = rows, m.cols = cols, m.scale_dtype = dtype;
  TQ_CHECK_OK(check_size("data", data, rows, m.row_bytes(), weight_format_str(m)));
  m.data = data.data();
  return m;
}

Result<PackedMatrix> make_quant_matrix(const QuantSpec& spec, int64_t rows, int64_t cols,
                                       std::span<const uint8_t> weight, DType scale_dtype,
                                       std::span<const uint8_t> scales,
                                       std::span<const uint8_t> biases) {
  TQ_CHECK_OK(validate_quant_spec(spec));
  PackedMatrix m;
  m.bits = spec.bits, m.group = spec.group_size, m.scale_dtype = scale_dtype;
  switch (spec.mode) {
    case QuantMode::kAffine:
      m.format = WeightFormat::kAffine;
      if (spec.bits < 2) return err("packed matrix: {}-bit affine has no kernel", spec.bits);
      if (scale_dtype != DType::kF32 && scale_dtype != DType::kF16 && scale_dtype != DType::kBF16)
        return err("packed matrix: affine scales of dtype {}", dtype_name(scale_dtype));
      break;
    case QuantMode::kMxfp4:
      m.format = WeightFormat::kMxfp4;
      break;
    case QuantMode::kNvfp4:
      m.format = WeightFormat::kNvfp4;
      break;
    case QuantMode::kMxfp8:
      m.format = WeightFormat::kMxfp8;
      break;
  }
  if (spec.mode != QuantMode::kAffine) {
    if (scale_dtype != DType::kU8 && scale_dtype != DType::kF8E8M0 && scale_dtype != DType::kF8E4M3)
      return err("packed matrix: {} scales of dtype {}", quant_spec_str(spec),
                 dtype_name(scale_dtype));
    m.scale_dtype = DType::kU8;
  }
  if (rows < 0 || cols < 0 || cols > (int64_t{1} << 40) || cols % spec.group_size != 0 ||
      cols % 32 != 0)
    return err("packed matrix: {} cannot have shape [{}, {}]", quant_spec_str(spec), rows, cols);
  m.rows = rows, m.cols = cols;
  const std::string name = weight_format_str(m);
  const int64_t sb = m.groups() * static_cast<int64_t>(dtype_size(m.scale_dtype));
  TQ_CHECK_OK(check_size("weight", weight, rows, m.row_bytes(), name));
  TQ_CHECK_OK(check_size("scales", scales, rows, sb, name));
  if (spec.mode == QuantMode::kAffine) {
    TQ_CHECK_OK(check_size("biases", biases, rows, sb, name));
    m.biases = biases.data();
  } else if (!biases.empty()) {
    return err("{}: this mode has no biases", name);
  }
  m.data = weight.data();
  m.scales = scales.data();
  return m;
}

std::string weight_format_str(const PackedMatrix& w) {
  switch (w.format) {
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kF16:
      return "f16";
    case WeightFormat::kBF16:
      return "bf16";
    case WeightFormat::kAffine:
      return fmt::format("affine {}-bit g{}", w.bits, w.group);
    case WeightFormat::kMxfp4:
      return "mxfp4";
    case WeightFormat::kNvfp4:
      return "nvfp4";
    case WeightFormat::kMxfp8:
      return "mxfp8";
  }
  return "?";
}

float packed_weight(const PackedMatrix& w, int64_t r, int64_t k) {
  const uint8_t* row = w.data + r * w.row_bytes();
  switch (w.format) {
    case WeightFormat::kF32:
      return load_f32(row + 4 * k);
    case WeightFormat::kF16:
      return load_f16(row + 2 * k);
    case WeightFormat::kBF16:
      return load_bf16(row + 2 * k);
    default:
      break;
  }
  const int64_t gi = r * w.groups() + k / w.group;
  const uint32_t q = unpack_code(row, k, w.bits);
  switch (w.format) {
    case WeightFormat::kAffine: {
      const size_t es = dtype_size(w.scale_dtype);
      float s = load_float(w.scale_dtype, w.scales + gi * es);
      float b = load_float(w.scale_dtype, w.biases + gi * es);
      return s * static_cast<float>(q) + b;
    }
    case WeightFormat::kMxfp4:
      return e8m0_to_f32(w.scales[gi]) * e2m1_to_f32(static_cast<uint8_t>(q));
    case WeightFormat::kNvfp4:
      return e4m3_to_f32(w.scales[gi]) * e2m1_to_f32(static_cast<uint8_t>(q));
    default:  // kMxfp8
      return e8m0_to_f32(w.scales[gi]) * e4m3_to_f32(static_cast<uint8_t>(q));
  }
}

void packed_decode_row_ref(const PackedMatrix& w, int64_t r, float* out) {
  for (int64_t k = 0; k < w.cols; ++k) out[k] = packed_weight(w, r, k);
}

}  // namespace tq
