// Opens any MODEL argument: a Hugging Face or MLX safetensors directory, or a GGUF file.
// Every verb that reads a model goes through open_model().
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "io/tensor_source.h"
#include "model/model_config.h"

namespace tq {

enum class SourceKind : uint8_t { kHfDir, kMlxDir, kGguf };
std::string_view source_kind_name(SourceKind k);  // "hf", "mlx", "gguf"

struct ModelSource {
  std::string path;
  SourceKind kind = SourceKind::kHfDir;
  nlohmann::json config_json;  // config.json as read, or as rebuilt from GGUF metadata
  ModelConfig config;
  std::unique_ptr<TensorSource> tensors;
  std::vector<std::string> weight_files;  // absolute paths of the files holding tensors
  uint64_t file_bytes = 0;                // their total size on disk
};

Result<ModelSource> open_model(const std::string& path);

// mlx-lm's bits per weight: 8 * stored bytes / logical parameters (FORMATS.md §4.3).
struct SizeStats {
  uint64_t params = 0;
  uint64_t bytes = 0;
  double bpw = 0.0;
};
SizeStats size_stats(const TensorSource& tensors);
// The same accounting over logical tensors (e.g. a conversion plan's output, before writing).
SizeStats size_stats(std::span<const TensorInfo> tensors);

}  // namespace tq
