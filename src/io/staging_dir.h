// Atomic publication of an output directory: everything is written into a staging directory
// beside the destination and renamed into place only when complete, so a crash leaves either
// the old destination or the complete new one, never a partial directory.
#pragma once

#include <string>

#include "base/result.h"

namespace tq {

class StagingDir {
 public:
  // Checks `dest` (absent, an empty directory, or anything with `replace`) and creates
  // "<dest>.tmp-XXXXXX" beside it.
  static Result<StagingDir> create(const std::string& dest, bool replace);
  StagingDir(StagingDir&& o) noexcept;
  StagingDir& operator=(StagingDir&&) = delete;
  ~StagingDir();  // removes the staging directory unless published

  const std::string& path() const { return staging_; }
  // Writes a whole file inside the staging directory (flushed to disk).
  Status write_file(const std::string& name, std::string_view content) const;
  // fsyncs the staging directory, moves any old `dest` aside, renames staging -> dest, and
  // removes the old one.
  Status publish();

 private:
  StagingDir() = default;
  std::string dest_;
  std::string staging_;
  bool published_ = false;
};

}  // namespace tq
