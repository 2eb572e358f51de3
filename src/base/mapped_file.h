// Read-only memory mapping of a whole file; tensors are used in place, never copied on open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/result.h"

namespace tq {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> open(const std::string& path);

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the pages wholly inside `part` (a range of this mapping; anything else is ignored)
  // from the process's resident set after a one-time read. The mapping is read-only and
  // private, so nothing is lost: touching them again re-reads the file.
  void release(std::span<const uint8_t> part) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace tq
