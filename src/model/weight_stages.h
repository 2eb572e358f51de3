// The two seams of the conversion pipeline (DESIGN.md "How data flows through tq convert"):
// float->float weight transforms before quantization (rotate/ implements them) and the layer
// quantizer that chooses codes (quant/: RTN, GPTQ). Kept below both so neither includes the
// driver (convert/convert.h), which owns loading, streaming a layer at a time and publishing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "tensor/tensor.h"

namespace tq {

using TensorMap = std::map<std::string, FloatTensor>;  // HF tensor name -> f32 tensor

// A float->float stage before quantization. The driver calls edit_config() once before
// planning (so the plan sees e.g. an untied lm_head), apply_globals() on embed_tokens, the final
// norm and lm_head (when present) and apply_layer() on each decoder layer's tensors. A transform
// may add tensors the plan expects (lm_head when untying) but must not rename or reshape others.
class WeightTransform {
 public:
  virtual ~WeightTransform() = default;
  virtual std::vector<std::string> describe() const = 0;         // --dry-run lines
  virtual Status edit_config(nlohmann::json& config) const = 0;  // e.g. tie_word_embeddings=false
  virtual Status apply_globals(TensorMap& globals) = 0;          // may create lm_head (untie)
  virtual Status apply_layer(int64_t layer, TensorMap& layer_tensors) = 0;
  virtual nlohmann::json metadata() const = 0;  // goes into tq_metadata.json
  // Extra files (name -> bytes) written into the staging directory, so they are published
  // atomically with the model (e.g. rotation.json). Called once, after every layer is applied.
  virtual Result<std::vector<std::pair<std::string, std::string>>> sidecar_files() const {
    return std::vector<std::pair<std::string, std::string>>{};
  }
};

// One quantized matrix as it is written: "<name>.weight" U32 (little-endian words), "<name>.scales"
// (scale_dtype: the float dtype for affine, U8 for fp modes) and "<name>.biases" (affine only).
struct QuantizedModule {
  std::string name;  // module path: "model.layers.3.mlp.down_proj"
  Shape shape;       // logical [rows, cols]
  QuantSpec spec;
  DType scale_dtype = DType::kBF16;
  std::vector<uint8_t> weight, scales, biases;
  nlohmann::json info;  // per-module facts for tq_metadata.json (e.g. GPTQ loss); may be null
};

// Chooses the codes of every quantized matrix of one layer (layer = -1 for the globals). The
// driver calls it for every group in model order (embed_tokens, layer 0..N-1, final norm,
// lm_head; all globals at once when transforms run), with all of the group's float tensors
// after the transforms, also when `specs` is empty.
// `specs` maps HF tensor names ("...down_proj.weight") of `tensors` to their spec; `dtype` is
// the output float dtype (affine scales/biases). Returns the modules of `specs` it has done:
// one may be left for a later call, which returns it (GPTQ's head waits for the last layer);
// by the last group every module of the plan has been returned.
class LayerQuantizer {
 public:
  virtual ~LayerQuantizer() = default;
  virtual Result<std::vector<QuantizedModule>> quantize(
      int64_t layer, const TensorMap& tensors, const std::map<std::string, QuantSpec>& specs,
      DType dtype) = 0;
  virtual nlohmann::json metadata() const = 0;
};

}  // namespace tq
