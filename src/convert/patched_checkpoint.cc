#include "convert/patched_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "io/json_parse.h"
#include "io/staging_dir.h"

namespace tq {

Status check_patch_dest(const std::string& src_dir, const std::string& dest, bool force) {
  std::error_code ec;
  if (std::filesystem::exists(dest, ec) && std::filesystem::equivalent(src_dir, dest, ec))
    return err("{}: the output must be a new directory, not the quantized model itself", dest);
  return StagingDir::check_dest(dest, force);
}

Status write_patched_checkpoint(const DirTensorSource& src,
                                const std::map<std::string, std::vector<uint8_t>>& replace,
                                const nlohmann::json& metadata, const std::string& dest,
                                bool force) {
  namespace fs = std::filesystem;
  const std::string& dir = src.checkpoint().dir;
  TQ_CHECK_OK(check_patch_dest(dir, dest, force));
  std::error_code ec;
  // Each replaced tensor: its shard and the offset of its bytes in that file.
  std::map<std::string, std::vector<std::pair<uint64_t, const std::vector<uint8_t>*>>> patches;
  std::set<std::string> found;
  for (const auto& [name, bytes] : replace) {
    size_t fi = 0;
    const SafetensorsEntry* e = src.stored(name, &fi);
    if (e == nullptr) return err("{}: no stored tensor '{}'", dir, name);
    if (e->end - e->begin != bytes.size())
      return err("{}: '{}' holds {} bytes, {} given", dir, name, e->end - e->begin, bytes.size());
    const SafetensorsFile& f = src.files()[fi];
    patches[fs::path(f.path()).filename().string()].push_back({e->begin, &bytes});
    found.insert(name);
  }
  TQ_TRY(StagingDir stage, StagingDir::create(dest, force));
  bool wrote_metadata = false;
  for (const fs::directory_entry& de : fs::directory_iterator(dir, ec)) {
    if (!de.is_regular_file()) continue;
    const std::string name = de.path().filename().string();
    TQ_TRY(std::string text, read_text_file(de.path().string()));
    if (name == "tq_metadata.json") {
      TQ_TRY(nlohmann::json meta, parse_json(text, de.path().string()));
      if (!meta.is_object()) meta = nlohmann::json::object();
      for (const auto& [k, v] : metadata.items()) meta[k] = v;
      text = meta.dump(2) + "\n";
      wrote_metadata = true;
    } else if (auto it = patches.find(name); it != patches.end()) {
      uint64_t header = 0;
      if (text.size() < 8) return err("{}: truncated safetensors file", de.path().string());
      std::memcpy(&header, text.data(), 8);
      const uint64_t data_start = 8 + header;
      for (const auto& [begin, bytes] : it->second) {
        if (data_start + begin + bytes->size() > text.size())
          return err("{}: a tensor lies outside the file", de.path().string());
        std::memcpy(text.data() + data_start + begin, bytes->data(), bytes->size());
      }
    }
    TQ_CHECK_OK(stage.write_file(name, text));
  }
  if (ec) return err("{}: cannot list the directory: {}", dir, ec.message());
  if (!wrote_metadata) TQ_CHECK_OK(stage.write_file("tq_metadata.json", metadata.dump(2) + "\n"));
  return stage.publish();
}

}  // namespace tq
