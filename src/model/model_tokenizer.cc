#include "model/model_tokenizer.h"

#include <filesystem>

#include "io/gguf.h"
#include "model/gguf_model.h"
#include "model/gguf_tokenizer.h"

namespace tq {

namespace {

Result<Tokenizer> tokenizer_from_gguf(const GgufFile& f) {
  TQ_TRY(HfTokenizerFiles files, gguf_hf_tokenizer(f));
  std::string text = files.tokenizer.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return Tokenizer::from_json(text, f.path() + " (tokenizer rebuilt from GGUF metadata)");
}

}  // namespace

Result<Tokenizer> load_model_tokenizer(const ModelSource& m) {
  if (m.kind == SourceKind::kGguf) {
    const auto* g = dynamic_cast<const GgufTensorSource*>(m.tensors.get());
    if (g == nullptr) return err("{}: GGUF model without a GGUF tensor source", m.path);
    return tokenizer_from_gguf(g->file());
  }
  std::filesystem::path p = std::filesystem::path(m.path) / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec))
    return err("{}: no tokenizer.json in the model directory", m.path);
  return Tokenizer::from_file(p.string());
}

Result<Tokenizer> load_tokenizer_any(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p(path);
  if (std::filesystem::is_directory(p, ec)) {
    if (std::filesystem::is_regular_file(p / "tokenizer.json", ec))
      return Tokenizer::from_file((p / "tokenizer.json").string());
    return err("{}: no tokenizer.json in this directory", path);
  }
  if (!std::filesystem::exists(p, ec)) return err("{}: no such file or directory", path);
  if (p.extension() == ".gguf") {
    TQ_TRY(GgufFile f, GgufFile::open(path));
    return tokenizer_from_gguf(f);
  }
  return Tokenizer::from_file(path);
}

}  // namespace tq
