// safetensors (FORMATS.md §1): strict memory-mapped reader and a streaming sharded writer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/result.h"
#include "tensor/tensor.h"

namespace tq {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // relative to the data buffer
  uint64_t end = 0;
};

// The validated header of a safetensors file (everything but the tensor bytes).
struct SafetensorsHeader {
  uint64_t data_start = 0;                // 8 + header length
  std::vector<SafetensorsEntry> entries;  // sorted by name
  std::map<std::string, std::string> metadata;
};

// Parses and validates a whole safetensors file held in memory (`file` = all its bytes);
// `path` prefixes every error. Exposed so that it can be fuzzed without I/O.
Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> file, const std::string& path);

// One .safetensors file, validated strictly on open (header bounds, dtype names, shapes,
// contiguous non-overlapping offsets that cover the whole buffer, string-only metadata).
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // sorted by name
  const SafetensorsEntry* find(std::string_view name) const;
  std::span<const uint8_t> data(const SafetensorsEntry& e) const;
  // Drops e's pages from the resident set (MappedFile::release) once its bytes were consumed.
  void release(const SafetensorsEntry& e) const { file_.release(data(e)); }
  // The same for any bytes of the mapping (none where `part` lies outside it).
  void release(std::span<const uint8_t> part) const { file_.release(part); }
  TensorView view(const SafetensorsEntry& e) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct TensorDecl {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t nbytes() const { return static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dtype); }
};

struct ShardedWriterOptions {
  uint64_t max_shard_bytes = 5ull << 30;  // mlx-lm's 5 GiB
  std::map<std::string, std::string> metadata = {{"format", "mlx"}};
  bool write_index = true;     // model.safetensors.index.json, also for one shard (as mlx-lm)
  std::string stem = "model";  // STEM.safetensors / STEM-0000k-of-0000n.safetensors
};

// Writes a set of declared tensors into model.safetensors or model-XXXXX-of-YYYYY.safetensors
// inside `dir`. All tensors are declared up front (so headers are final), sorted by name,
// assigned to shards greedily, then their bytes may arrive one at a time in any order.
class ShardedWriter {
 public:
  static Result<std::unique_ptr<ShardedWriter>> create(const std::string& dir,
                                                       std::vector<TensorDecl> decls,
                                                       ShardedWriterOptions opts = {});
  ~ShardedWriter();
  Status write(const std::string& name, std::span<const uint8_t> bytes);
  // Checks every tensor was written, flushes (fsync) and writes the index.
  Status finish();
  std::vector<std::string> shard_files() const;  // file names (no dir)

 private:
  ShardedWriter() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq
