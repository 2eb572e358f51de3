// Atomic publication of an output directory: everything is written into a staging directory
// beside the destination and renamed into place only when complete, so a crash leaves either
// the old destination or the complete new one, never a partial directory.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"

namespace tq {

class StagingDir {
 public:
  // Checks `dest` (absent, an empty directory, or anything with `replace`), removes stale
  // staging directories of `dest` that a killed process left, and creates "<dest>.tmp-XXXXXX"
  // beside it. The live staging directory is flock()ed for the object's lifetime; one whose lock
  // nobody holds is stale.
  static Result<StagingDir> create(const std::string& dest, bool replace);
  // The checks create() makes on `dest` alone (nothing is created): callers that want to fail
  // before long work starts.
  static Status check_dest(const std::string& dest, bool replace);
  StagingDir(StagingDir&& o) noexcept;
  StagingDir& operator=(StagingDir&&) = delete;
  ~StagingDir();  // removes the staging directory unless published

  const std::string& path() const { return staging_; }
  // Writes a whole file inside the staging directory (flushed to disk).
  Status write_file(const std::string& name, std::string_view content) const;
  // fsyncs the staging directory and puts it in place of `dest`: an atomic exchange with an old
  // directory (renameat2 RENAME_EXCHANGE; else move aside + rename), then removes the old one.
  Status publish();
  // Names "<dest>.tmp-*" of unlocked (stale) staging directories; exposed for tests.
  static std::vector<std::string> stale_staging_dirs(const std::string& dest);

 private:
  StagingDir() = default;
  std::string dest_;
  std::string staging_;
  bool published_ = false;
  int lock_fd_ = -1;  // open O_DIRECTORY fd of the staging directory, holding its flock
};

}  // namespace tq
