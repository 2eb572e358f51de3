// tq import FILE.gguf -o DIR: a GGUF (llama/qwen2/qwen3) as a Hugging Face checkpoint
// (config.json, safetensors, tokenizer files) that transformers and stock mlx-lm load.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/verb.h"
#include "formats/ggml_blocks.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "io/staging_dir.h"
#include "model/gguf_model.h"
#include "model/gguf_tokenizer.h"

namespace tq::cli {
namespace {

struct ImportArgs {
  std::string gguf;
  std::string out;
  std::string dtype;  // "", "f32", "f16", "bf16"
  bool force = false;
};

Result<std::string> dump_json(const nlohmann::json& j, int indent, const std::string& name) {
  try {
    return j.dump(indent) + "\n";
  } catch (const nlohmann::json::exception& e) {
    return err("{}: cannot encode: {}", name, e.what());
  }
}

Status run_import(const ImportArgs& a) {
  TQ_TRY(GgufFile file, GgufFile::open(a.gguf));
  auto shared = std::make_shared<const GgufFile>(std::move(file));
  const GgufFile& f = *shared;
  TQ_TRY(auto src, GgufTensorSource::create(shared));
  DType dtype = gguf_default_dtype(f);
  if (a.dtype == "f32") {
    dtype = DType::kF32;
  } else if (a.dtype == "f16") {
    dtype = DType::kF16;
  } else if (a.dtype == "bf16") {
    dtype = DType::kBF16;
  }
  // Everything that can fail on the source's content fails before anything is written.
  for (const auto& t : src->tensors()) {
    const GgufTensorInfo* g = src->gguf_tensor(t.name);
    auto info = ggml_type_info(g->type_id);
    if (!info || !info->can_dequantize)
      return err("{}: tensor '{}' has type {}, which tq cannot decode", a.gguf, g->name,
                 g->type_name);
  }
  TQ_TRY(nlohmann::json config, gguf_hf_config(f, dtype));
  TQ_TRY(HfTokenizerFiles tok, gguf_hf_tokenizer(f));
  nlohmann::json meta = {{"tool", "tq"},
                         {"version", TQ_VERSION},
                         {"command", "import"},
                         {"dtype", dtype_name(dtype)},
                         {"source", {{"path", a.gguf}, {"gguf_version", f.version()}}}};
  struct stat st;
  if (::stat(a.gguf.c_str(), &st) == 0) meta["source"]["bytes"] = st.st_size;
  TQ_TRY(auto name, f.get_string("general.name"));
  if (name) meta["source"]["general.name"] = *name;
  const std::pair<const char*, std::pair<const nlohmann::json*, int>> jsons[] = {
      {"config.json", {&config, 4}},
      {"tokenizer.json", {&tok.tokenizer, 2}},
      {"tokenizer_config.json", {&tok.tokenizer_config, 2}},
      {"special_tokens_map.json", {&tok.special_tokens_map, 2}},
      {"generation_config.json", {&tok.generation_config, 2}},
      {"tq_metadata.json", {&meta, 2}},
  };
  std::vector<std::pair<std::string, std::string>> texts;
  for (const auto& [fname, what] : jsons) {
    TQ_TRY(std::string text, dump_json(*what.first, what.second, a.gguf + ": " + fname));
    texts.emplace_back(fname, std::move(text));
  }

  TQ_TRY(StagingDir stage, StagingDir::create(a.out, a.force));
  std::fprintf(stderr, "tq import: %s -> %s (%zu tensors as %s)\n", a.gguf.c_str(), a.out.c_str(),
               src->tensors().size(), std::string(dtype_name(dtype)).c_str());
  std::vector<TensorDecl> decls;
  for (const auto& t : src->tensors()) decls.push_back({t.name, dtype, t.shape});
  TQ_TRY(auto writer, ShardedWriter::create(stage.path(), std::move(decls)));
  // Stream in file order, one tensor in memory at a time.
  std::vector<std::pair<uint64_t, const TensorInfo*>> order;
  for (const auto& t : src->tensors()) order.emplace_back(src->gguf_tensor(t.name)->offset, &t);
  std::sort(order.begin(), order.end());
  size_t k = 0;
  for (const auto& [off, t] : order) {
    TQ_TRY(FloatTensor x, src->load_f32(t->name));
    std::vector<uint8_t> bytes = encode_from_f32(x.data, dtype);
    TQ_CHECK_OK(writer->write(t->name, bytes));
    ++k;
    if (k % 32 == 0 || k == order.size())
      std::fprintf(stderr, "tq import: [%zu/%zu] %s %s\n", k, order.size(), t->name.c_str(),
                   shape_str(t->shape).c_str());
  }
  TQ_CHECK_OK(writer->finish());
  for (const auto& [fname, text] : texts) TQ_CHECK_OK(stage.write_file(fname, text));
  TQ_CHECK_OK(stage.publish());
  std::fprintf(stderr, "tq import: wrote %s\n", a.out.c_str());
  return ok_status();
}

const bool kRegistered = register_verb({
    "import",
    "GGUF file -> Hugging Face checkpoint directory (safetensors, config, tokenizer)",
    20,
    [](CLI::App& app) -> VerbRun {
      auto a = std::make_shared<ImportArgs>();
      app.add_option("gguf", a->gguf, "GGUF file (llama, qwen2 or qwen3)")->required();
      app.add_option("-o,--output", a->out, "output directory")->required();
      app.add_option("--dtype", a->dtype,
                     "weight dtype: f32, f16 or bf16 (default: f32 for a quantized source, "
                     "else the source's float type)")
          ->check(CLI::IsMember({"f32", "f16", "bf16"}));
      app.add_flag("--force", a->force, "replace a non-empty output directory");
      return [a]() { return run_import(*a); };
    },
});

}  // namespace
}  // namespace tq::cli
