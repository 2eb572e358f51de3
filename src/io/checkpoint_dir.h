// A Hugging Face / MLX checkpoint directory: config.json, safetensors shards (through the
// index or by glob), tokenizer files; and a TensorSource over it that yields f32.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "io/quant_config.h"
#include "io/safetensors.h"
#include "io/tensor_source.h"

namespace tq {

// Files copied verbatim next to the weights (FORMATS.md §4.7), in this order.
extern const std::vector<std::string_view> kTokenizerFileNames;

struct CheckpointDir {
  std::string dir;
  std::string config_path;  // dir/config.json
  nlohmann::json config;    // config.json as parsed (an object)
  std::optional<QuantizationConfig> quantization;
  bool has_index = false;  // weights located through model.safetensors.index.json
  std::map<std::string, std::string> weight_map;  // the index's tensor -> shard (empty if none)
  std::vector<std::string> shard_files;           // file names inside dir, sorted
  std::vector<std::string> tokenizer_files;       // present kTokenizerFileNames, in that order
  std::vector<std::string> warnings;              // oddities that do not stop reading
};

// Reads config.json and locates the shards; opens no tensor data. With an index, every
// referenced shard must exist; without one, `model*.safetensors` (else `*.safetensors`).
Result<CheckpointDir> open_checkpoint_dir(const std::string& dir);

// Every tensor of a checkpoint directory as f32: floats converted, MLX-quantized modules
// (P.weight U32 + P.scales [+ P.biases]) dequantized with the spec from config.json.
class DirTensorSource : public TensorSource {
 public:
  static Result<std::unique_ptr<DirTensorSource>> open(const std::string& dir);
  // The files `stem`.safetensors or `stem`-0000k-of-0000n.safetensors of `dir`, which its index
  // does not list (qwen3_5's MTP companion, "mtp"), quantized as dir's config.json says; an
  // error when there are none.
  static Result<std::unique_ptr<DirTensorSource>> open_companion(const std::string& dir,
                                                                 std::string_view stem);

  const std::string& path() const override { return ckpt_.dir; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  Result<FloatTensor> load_f32(const std::string& name) const override;
  Result<FloatTensor> load_f32_compute(const std::string& name) const override;
  // The present kTokenizerFileNames, verbatim.
  Result<NamedFiles> tokenizer_files() const override;

  const CheckpointDir& checkpoint() const { return ckpt_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // A tensor exactly as stored (e.g. "P.scales"), or nullptr.
  const SafetensorsEntry* stored(std::string_view stored_name, size_t* file_index) const;

 private:
  Result<FloatTensor> load(const std::string& name, bool f32_math) const;
  struct Stored {  // one stored tensor: file index + entry (entries live in files_)
    size_t file = 0;
    const SafetensorsEntry* entry = nullptr;
  };
  struct Parts {  // the stored pieces of one logical tensor
    Stored weight;
    std::optional<Stored> scales, biases;  // MLX-quantized only
  };
  DirTensorSource() = default;
  Status build();

  CheckpointDir ckpt_;
  std::vector<SafetensorsFile> files_;
  std::vector<TensorInfo> infos_;                      // sorted by name
  std::vector<Parts> parts_;                           // parallel to infos_
  std::map<std::string, Stored, std::less<>> stored_;  // every stored tensor by name
};

}  // namespace tq
