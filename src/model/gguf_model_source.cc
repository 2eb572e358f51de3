// open_model() for a GGUF file: the HF view (config rebuilt from metadata, tensors under HF
// names, tokenizer files rebuilt). Kept in its own file so that linking GgufTensorSource alone
// does not need parse_model_config.
#include <filesystem>

#include "model/gguf_model.h"
#include "model/gguf_tokenizer.h"
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

Result<NamedFiles> GgufTensorSource::tokenizer_files() const {
  TQ_TRY(HfTokenizerFiles tok, gguf_hf_tokenizer(*file_));
  const std::pair<const char*, const nlohmann::json*> files[] = {
      {"tokenizer.json", &tok.tokenizer},
      {"tokenizer_config.json", &tok.tokenizer_config},
      {"special_tokens_map.json", &tok.special_tokens_map},
      {"generation_config.json", &tok.generation_config},
  };
  NamedFiles out;
  for (const auto& [name, j] : files) {
    try {
      out.emplace_back(name, j->dump(2) + "\n");
    } catch (const nlohmann::json::exception& e) {
      return err("{}: {}: cannot encode: {}", path(), name, e.what());
    }
  }
  return out;
}

}  // namespace tq
