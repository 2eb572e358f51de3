#include "io/staging_dir.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tq {

namespace fs = std::filesystem;

namespace {

Status fsync_path(const std::string& path, bool dir) {
  int fd = ::open(path.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return err("{}: cannot open for sync: {}", path, std::strerror(errno));
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0) return err("{}: fsync failed: {}", path, std::strerror(e));
  return ok_status();
}

std::string parent_of(const std::string& p) {
  fs::path parent = fs::path(p).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

Result<StagingDir> StagingDir::create(const std::string& dest, bool replace) {
  std::string d = dest;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  std::error_code ec;
  auto st = fs::symlink_status(d, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st) && !replace)
      return err("{}: exists and is not a directory (use --force to replace it)", d);
    if (fs::is_directory(st) && !fs::is_empty(d, ec) && !replace)
      return err("{}: exists and is not empty (use --force to replace it)", d);
  }
  std::string parent = parent_of(d);
  if (!fs::is_directory(parent, ec)) return err("{}: parent directory does not exist", d);
  std::string tmpl = d + ".tmp-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    return err("{}: cannot create staging directory: {}", tmpl, std::strerror(errno));
  // mkdtemp makes it 0700; a published checkpoint should be readable like any new directory.
  mode_t mask = ::umask(0);
  ::umask(mask);
  fs::permissions(tmpl, static_cast<fs::perms>(0777 & ~mask), ec);
  StagingDir s;
  s.dest_ = d;
  s.staging_ = tmpl;
  return s;
}

StagingDir::StagingDir(StagingDir&& o) noexcept
    : dest_(std::move(o.dest_)), staging_(std::move(o.staging_)), published_(o.published_) {
  o.published_ = true;  // the moved-from object owns nothing
}

StagingDir::~StagingDir() {
  if (published_ || staging_.empty()) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

Status StagingDir::write_file(const std::string& name, std::string_view content) const {
  std::string path = (fs::path(staging_) / name).string();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return err("{}: cannot create: {}", path, std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      return err("{}: write failed: {}", path, std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0) return err("{}: fsync failed: {}", path, std::strerror(e));
  return ok_status();
}

Status StagingDir::publish() {
  TQ_CHECK_OK(fsync_path(staging_, true));
  std::error_code ec;
  std::string old;
  auto st = fs::symlink_status(dest_, ec);
  if (fs::exists(st) && !fs::is_directory(st)) {
    if (!fs::remove(dest_, ec)) return err("{}: cannot remove: {}", dest_, ec.message());
  } else if (fs::exists(st)) {
    old = dest_ + ".old-XXXXXX";
    if (::mkdtemp(old.data()) == nullptr)
      return err("{}: cannot reserve a name to move the old directory aside: {}", dest_,
                 std::strerror(errno));
    // rename() onto an empty directory replaces it; the reserved name is such a directory.
    if (::rename(dest_.c_str(), old.c_str()) != 0) {
      int e = errno;
      fs::remove(old, ec);
      return err("{}: cannot move the old directory aside: {}", dest_, std::strerror(e));
    }
  }
  if (::rename(staging_.c_str(), dest_.c_str()) != 0) {
    int e = errno;
    if (!old.empty()) ::rename(old.c_str(), dest_.c_str());  // put the old one back
    return err("{}: cannot rename {} into place: {}", dest_, staging_, std::strerror(e));
  }
  published_ = true;
  TQ_CHECK_OK(fsync_path(parent_of(dest_), true));
  if (!old.empty()) fs::remove_all(old, ec);
  return ok_status();
}

}  // namespace tq
