// open_model() for a GGUF file: the HF view (config rebuilt from metadata, tensors under HF
// names). Kept in its own file so that linking GgufTensorSource alone does not need
// parse_model_config.
#include <filesystem>

#include "model/gguf_model.h"
#include "model/model_source.h"

namespace tq {

Result<ModelSource> open_gguf_model_source(const std::string& path) {
  TQ_TRY(GgufFile file, GgufFile::open(path));
  auto shared = std::make_shared<const GgufFile>(std::move(file));
  ModelSource m;
  m.path = path;
  m.kind = SourceKind::kGguf;
  TQ_TRY(m.config_json, gguf_hf_config(*shared, gguf_default_dtype(*shared)));
  TQ_TRY(m.config, parse_model_config(m.config_json, path));
  TQ_TRY(m.tensors, GgufTensorSource::create(shared));
  std::error_code ec;
  m.weight_files = {std::filesystem::absolute(path, ec).string()};
  m.file_bytes = std::filesystem::file_size(path, ec);
  return m;
}

}  // namespace tq
