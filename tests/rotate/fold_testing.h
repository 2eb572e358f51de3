// Test-side driver of the folds until `tq convert --rotate-weights --no-quantize` exists: opens
// a model, folds every tensor (globals, then layer by layer, as convert will) and writes the
// folded float checkpoint (config.json, safetensors, tokenizer files, rotation.json).
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "io/checkpoint_dir.h"
#include "io/safetensors.h"
#include "model/model_source.h"
#include "model/tensor_table.h"
#include "rotate/fold_apply.h"
#include "rotate/fold_plan.h"

namespace tq::testing {

inline Result<TensorMap> load_tensors(const TensorSource& src,
                                      const std::vector<TensorSpec>& specs) {
  TensorMap m;
  for (const auto& s : specs) {
    TQ_TRY(FloatTensor t, src.load_f32(s.name));
    m.emplace(s.name, std::move(t));
  }
  return m;
}

// Folds the model at `src_path` into `dst` (created), stored as `dtype` (F32/F16/BF16).
inline Status write_folded_model(const std::string& src_path, const std::string& dst,
                                 const RotationOptions& opts, DType dtype) {
  TQ_TRY(ModelSource src, open_model(src_path));
  TQ_TRY(FoldPlan plan, plan_folds(src.config, opts));
  TQ_TRY(Folder folder, Folder::create(std::move(plan)));
  nlohmann::json config = src.config_json;
  TQ_CHECK_OK(fold_config(folder.plan(), config));
  config["torch_dtype"] = dtype == DType::kF32   ? "float32"
                          : dtype == DType::kF16 ? "float16"
                                                 : "bfloat16";
  config.erase("quantization");
  config.erase("quantization_config");
  TQ_TRY(ModelConfig out_cfg, parse_model_config(config, dst + "/config.json"));

  std::vector<TensorSpec> in_specs = expected_tensors(src.config);
  std::vector<TensorSpec> out_specs = expected_tensors(out_cfg);
  std::vector<TensorDecl> decls;
  for (const auto& s : out_specs) decls.push_back({s.name, dtype, s.shape});
  std::filesystem::create_directories(dst);
  ShardedWriterOptions wo;
  TQ_TRY(auto writer, ShardedWriter::create(dst, decls, wo));
  auto write_map = [&](const TensorMap& m) -> Status {
    for (const auto& [name, t] : m)
      TQ_CHECK_OK(writer->write(name, encode_from_f32(t.data, dtype)));
    return ok_status();
  };

  std::vector<TensorSpec> globals, layer;
  for (const auto& s : in_specs) (s.layer < 0 ? globals : layer).push_back(s);
  TQ_TRY(TensorMap g, load_tensors(*src.tensors, globals));
  TQ_CHECK_OK(folder.apply_globals(g));
  TQ_CHECK_OK(write_map(g));
  for (int64_t l = 0; l < src.config.num_hidden_layers; ++l) {
    std::vector<TensorSpec> these;
    for (const auto& s : layer)
      if (s.layer == l) these.push_back(s);
    TQ_TRY(TensorMap m, load_tensors(*src.tensors, these));
    TQ_CHECK_OK(folder.apply_layer(l, m));
    TQ_CHECK_OK(write_map(m));
  }
  TQ_CHECK_OK(writer->finish());

  auto write_text = [&](const std::string& name, const std::string& text) -> Status {
    std::FILE* f = std::fopen((dst + "/" + name).c_str(), "wb");
    if (!f) return err("{}/{}: cannot write", dst, name);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    return ok_status();
  };
  TQ_CHECK_OK(write_text("config.json", config.dump(2) + "\n"));
  TQ_CHECK_OK(write_text("rotation.json", folder.rotation_json().dump(2) + "\n"));
  if (src.kind != SourceKind::kGguf)
    for (std::string_view name : kTokenizerFileNames) {
      std::filesystem::path p = std::filesystem::path(src_path) / name;
      if (std::filesystem::exists(p))
        std::filesystem::copy_file(p, std::filesystem::path(dst) / name,
                                   std::filesystem::copy_options::overwrite_existing);
    }
  return ok_status();
}

}  // namespace tq::testing
