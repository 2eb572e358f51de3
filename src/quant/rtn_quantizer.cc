#include "quant/rtn_quantizer.h"

#include <algorithm>

#include "formats/mlx_encode.h"
#include "formats/mlx_float.h"
#include "quant/gptq.h"

namespace tq {

Result<QuantizedModule> rtn_quantize_matrix(const std::string& tensor_name, const FloatTensor& w,
                                            const QuantSpec& spec, DType dtype, GridChoice grid) {
  if (w.shape.size() != 2)
    return err("tensor '{}': shape {} is not a matrix", tensor_name, shape_str(w.shape));
  QuantizedModule m;
  m.name = tensor_name.substr(0, tensor_name.rfind('.'));
  m.shape = w.shape;
  m.spec = spec;
  m.scale_dtype = quant_mode_has_biases(spec.mode) ? dtype : DType::kU8;
  if (grid == GridChoice::kSearch && spec.mode == QuantMode::kAffine) {
    std::vector<float> rounded(w.data);
    if (dtype != DType::kF32)
      for (float& v : rounded) v = round_to_dtype(v, dtype);
    auto r = rtn_quantize(rounded, w.shape[0], w.shape[1], spec, dtype, grid);
    if (!r.ok()) return err("tensor '{}': {}", tensor_name, r.error().message);
    m.weight = std::move(r.value().weight);
    m.scales = std::move(r.value().scales);
    m.biases = std::move(r.value().biases);
    return m;
  }
  // Round to the output dtype first (the values mlx-lm quantizes after its cast), a block of
  // rows at a time: rows are packed independently, so the blocks concatenate.
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(cols, 1));
  std::vector<float> rounded;
  std::vector<uint8_t> wq, sq, bq;
  if (cols % spec.group_size == 0) {  // else quantize_mlx reports the error
    const size_t groups = static_cast<size_t>(rows) * static_cast<size_t>(cols / spec.group_size);
    const size_t sbytes = quant_mode_has_biases(spec.mode) ? dtype_size(dtype) : 1;
    m.weight.reserve(static_cast<size_t>(rows) * static_cast<size_t>(cols) * spec.bits / 8);
    m.scales.reserve(groups * sbytes);
    if (quant_mode_has_biases(spec.mode)) m.biases.reserve(groups * sbytes);
  }
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    std::span<const float> src(w.data.data() + r0 * cols, static_cast<size_t>(n * cols));
    rounded.resize(src.size());
    if (dtype == DType::kF32) {
      std::copy(src.begin(), src.end(), rounded.begin());
    } else {
      std::vector<uint8_t> bytes = encode_from_f32(src, dtype);
      convert_to_f32(dtype, bytes, rounded);
    }
    Status st = quantize_mlx(spec, n, cols, rounded, dtype, &wq, &sq, &bq);
    if (!st.ok())
      return err("tensor '{}' ({}): {}", tensor_name, quant_spec_str(spec), st.error().message);
    m.weight.insert(m.weight.end(), wq.begin(), wq.end());
    m.scales.insert(m.scales.end(), sq.begin(), sq.end());
    m.biases.insert(m.biases.end(), bq.begin(), bq.end());
  }
  return m;
}

Result<std::vector<QuantizedModule>> RtnQuantizer::quantize(
    int64_t layer, const TensorMap& tensors, const std::map<std::string, QuantSpec>& specs,
    DType dtype) {
  std::vector<QuantizedModule> out;
  for (const auto& [name, spec] : specs) {
    auto it = tensors.find(name);
    if (it == tensors.end()) return err("layer {}: no tensor '{}' to quantize", layer, name);
    TQ_TRY(QuantizedModule m, rtn_quantize_matrix(name, it->second, spec, dtype, grid_));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace tq
