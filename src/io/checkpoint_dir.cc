#include "io/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "io/json_parse.h"

namespace tq {

namespace fs = std::filesystem;

const std::vector<std::string_view> kTokenizerFileNames = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
};

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool is_regular(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Names of regular, non-hidden files in `dir` that end with ".safetensors".
Result<std::vector<std::string>> list_safetensors(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  // increment(ec) rather than range-for: the throwing operator++ must not escape the library.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (!n.empty() && n[0] != '.' && ends_with(n, ".safetensors") && is_regular(it->path()))
      out.push_back(n);
  }
  if (ec) return err("{}: cannot list directory: {}", dir, ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

Status read_index(CheckpointDir& c, const std::string& index_path) {
  TQ_TRY(nlohmann::json j, read_json_file(index_path));
  if (!j.is_object()) return err("{}: not a JSON object", index_path);
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) return err("{}: missing object 'weight_map'", index_path);
  std::set<std::string> shards;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string())
      return err("{}: weight_map['{}'] must be a file name string", index_path, printable(name));
    const std::string& f = file.get_ref<const std::string&>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      return err("{}: weight_map['{}'] = '{}' is not a file name in the directory", index_path,
                 printable(name), printable(f));
    c.weight_map.emplace(name, f);
    shards.insert(f);
  }
  for (const auto& f : shards) {
    if (!is_regular(fs::path(c.dir) / f))
      return err("{}: shard '{}' referenced by the index does not exist", index_path, printable(f));
  }
  c.shard_files.assign(shards.begin(), shards.end());
  // mlx-lm ignores the index and globs model*.safetensors: strays would be loaded too.
  TQ_TRY(auto all, list_safetensors(c.dir));
  for (const auto& f : all)
    if (f.rfind("model", 0) == 0 && !shards.count(f))
      c.warnings.push_back(fmt::format(
          "{}: '{}' is not in the index but mlx-lm would load it (model*.safetensors)", c.dir, f));
  return ok_status();
}

}  // namespace

Result<CheckpointDir> open_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return err("{}: not a directory", dir);
  CheckpointDir c;
  c.dir = dir;
  c.config_path = (fs::path(dir) / "config.json").string();
  if (!is_regular(c.config_path)) return err("{}: missing config.json", dir);
  TQ_TRY(c.config, read_json_file(c.config_path));
  if (!c.config.is_object()) return err("{}: not a JSON object", c.config_path);
  TQ_TRY(c.quantization, parse_quantization_config(c.config, c.config_path));

  std::string index_path = (fs::path(dir) / kIndexName).string();
  if (is_regular(index_path)) {
    c.has_index = true;
    TQ_CHECK_OK(read_index(c, index_path));
  } else {
    TQ_TRY(auto all, list_safetensors(dir));
    for (const auto& f : all)
      if (f.rfind("model", 0) == 0) c.shard_files.push_back(f);
    if (c.shard_files.empty()) c.shard_files = all;
    if (c.shard_files.empty()) return err("{}: no .safetensors files", dir);
  }
  for (auto name : kTokenizerFileNames)
    if (is_regular(fs::path(dir) / name)) c.tokenizer_files.emplace_back(name);
  return c;
}

}  // namespace tq
