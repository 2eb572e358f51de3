#include "model/model_source.h"

#include <sys/stat.h>

#include <filesystem>

#include "io/checkpoint_dir.h"
#include "model/gguf_model.h"
#include "model/tensor_table.h"

namespace tq {

namespace {

Result<ModelSource> open_dir_model(const std::string& path) {
  TQ_TRY(auto src, DirTensorSource::open(path));
  const CheckpointDir& ck = src->checkpoint();
  TQ_TRY(ModelConfig cfg, parse_model_config(ck.config, ck.config_path));
  if (cfg.family == Family::kQwen35)  // which of the two layouts, and an MTP head: the names say
    for (const TensorInfo& t : src->tensors()) {
      if (t.name.starts_with("model.language_model.")) cfg.hf_layout = true;
      if (t.name == "mtp.fc.weight") cfg.has_mtp = true;
    }
  TQ_CHECK_OK(check_tensors_against_config(cfg, *src));
  ModelSource m;
  m.path = path;
  m.kind = cfg.quantization ? SourceKind::kMlxDir : SourceKind::kHfDir;
  m.config_json = ck.config;
  m.config = std::move(cfg);
  for (const auto& f : ck.shard_files) {
    std::string p = (std::filesystem::path(ck.dir) / f).string();
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) m.file_bytes += static_cast<uint64_t>(st.st_size);
    m.weight_files.push_back(std::move(p));
  }
  m.tensors = std::move(src);
  return m;
}

}  // namespace

Result<ModelSource> open_model(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return err("{}: no such file or directory", path);
  if (S_ISDIR(st.st_mode)) return open_dir_model(path);
  return open_gguf_model_source(path);
}

}  // namespace tq
