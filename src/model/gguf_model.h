// GGUF -> Hugging Face view of a llama / qwen2 / qwen3 model: config.json content and a
// TensorSource with HF tensor names, HF (row-major [out, in]) shapes and f32 values.
//
// llama.cpp's converter permutes the rows of q_proj/k_proj (weights and biases) of the llama
// family from HF's rotate-half order to interleaved pairs, per head:
//   gguf = hf.reshape(n_head, 2, head_dim/2, in).swapaxes(1, 2).reshape(out, in)
// (n_head for q, n_kv_head for k). GgufTensorSource undoes it, so its tensors equal the HF
// checkpoint's. qwen2/qwen3 GGUFs are not permuted.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "io/gguf.h"
#include "io/tensor_source.h"
#include "model/model_config.h"
#include "tensor/dtype.h"

namespace tq {

// Geometry read from a GGUF's metadata and tensors.
struct GgufGeometry {
  Family family = Family::kLlama;
  std::string arch;  // general.architecture: "llama", "qwen2", "qwen3"
  int64_t n_layers = 0;
  int64_t hidden = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  bool permuted_qk = false;  // llama family: q/k rows are in llama.cpp's interleaved order
  bool tied = true;          // no output.weight
};
Result<GgufGeometry> gguf_geometry(const GgufFile& f);

// The dtype an import writes by default: f32 when any tensor is quantized (nothing is lost),
// else the source's float type (bf16, else f16, else f32).
DType gguf_default_dtype(const GgufFile& f);

// config.json content (HF keys, mlx-lm compatible) for a model whose weights are written as
// `dtype` (f32/f16/bf16). Unsupported architectures are one clear error naming them.
Result<nlohmann::json> gguf_hf_config(const GgufFile& f, DType dtype);

// Maps a GGUF tensor name to its HF name in `family` (through the family's tensor table);
// nullopt when the name is not in the GGUF table or the family has no such tensor.
std::optional<std::string> gguf_to_hf_name(std::string_view gguf_name, Family family);

// Undoes llama.cpp's q/k row permutation: `in` and `out` are [rows, cols] row-major with
// rows = n_head * head_dim. HF row h*hd + s*hd/2 + j comes from GGUF row h*hd + 2j + s.
void unpermute_qk_rows(std::span<const float> in, std::span<float> out, int64_t n_head,
                       int64_t rows, int64_t cols);

struct ModelSource;
// open_model() for GGUF paths (defined in gguf_model_source.cc; needs parse_model_config).
Result<ModelSource> open_gguf_model_source(const std::string& path);

class GgufTensorSource : public TensorSource {
 public:
  static Result<std::unique_ptr<GgufTensorSource>> open(const std::string& path);
  static Result<std::unique_ptr<GgufTensorSource>> create(std::shared_ptr<const GgufFile> file);

  const std::string& path() const override { return file_->path(); }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Result<FloatTensor> load_f32(const std::string& name) const override;
  Result<std::optional<MlxQuantBytes>> load_mlx_quant(const std::string& name) const override;
  // Rebuilt from the metadata, as tq import writes them (gguf_model_source.cc).
  Result<NamedFiles> tokenizer_files() const override;

  const GgufFile& file() const { return *file_; }
  const GgufGeometry& geometry() const { return geo_; }
  const ModelConfig& config() const { return config_; }  // parsed from gguf_hf_config
  // The GGUF tensor stored under HF name `name` (nullptr if none).
  const GgufTensorInfo* gguf_tensor(const std::string& name) const;

 private:
  struct Entry {
    const GgufTensorInfo* gguf;
    int64_t permute_heads;  // 0: stored as in HF; else undo the q/k permutation with this many
  };
  std::shared_ptr<const GgufFile> file_;
  GgufGeometry geo_;
  ModelConfig config_;
  std::vector<TensorInfo> infos_;  // sorted by HF name
  std::vector<Entry> entries_;     // parallel to infos_
};

}  // namespace tq
