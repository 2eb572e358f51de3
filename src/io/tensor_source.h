// A lazy source of named tensors that yields any tensor as f32, whatever its stored form.
// Implemented for HF/MLX safetensors directories and for GGUF files (with HF names).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "formats/ggml_to_mlx.h"
#include "formats/quant_spec.h"
#include "tensor/tensor.h"

namespace tq {

struct TensorInfo {
  std::string name;     // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;          // logical (dequantized) shape
  std::string storage;  // how it is stored: "BF16", "F32", "Q4_1", "affine", "mxfp4", ...
  DType stored_dtype = DType::kF32;    // dtype of float storage or of the scales (quantized)
  std::optional<QuantSpec> mlx_quant;  // set for MLX-quantized tensors
  uint64_t stored_bytes = 0;           // bytes on disk incl. MLX scales/biases that belong to it
};

using NamedFiles = std::vector<std::pair<std::string, std::string>>;  // file name -> contents

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual const std::string& path() const = 0;
  // Logical tensors, sorted by name. For MLX-quantized modules, "P.scales"/"P.biases" are
  // folded into "P.weight" and not listed separately.
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  virtual Result<FloatTensor> load_f32(const std::string& name) const = 0;
  // The tensor as f32 compute uses it. Equals load_f32 except for MLX affine-quantized
  // matrices, whose s*q + b is evaluated in f32 instead of being rounded to the scales dtype:
  // what mlx's quantized matmul computes with f32 activations.
  virtual Result<FloatTensor> load_f32_compute(const std::string& name) const {
    return load_f32(name);
  }
  // The matrix as MLX-quantized bytes when its stored form is exactly one (GGUF Q4_0/Q4_1/
  // Q5_0/Q5_1/Q8_0/MXFP4 blocks), re-encoded without loss so the fast runtime keeps it packed;
  // nullopt for every other storage (and by default).
  virtual Result<std::optional<MlxQuantBytes>> load_mlx_quant(const std::string& name) const {
    (void)name;
    return std::optional<MlxQuantBytes>{};
  }
  // The tokenizer and generation files a checkpoint made from this source carries (so a
  // converter needs no knowledge of the source's kind). None by default.
  virtual Result<NamedFiles> tokenizer_files() const { return NamedFiles{}; }

  const TensorInfo* find(const std::string& name) const;
};

}  // namespace tq
