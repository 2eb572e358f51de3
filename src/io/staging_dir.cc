#include "io/staging_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

std::string strip_slashes(std::string d) {
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

// Atomically swaps two paths (Linux renameat2); false where the kernel or filesystem lacks it.
bool exchange_paths(const std::string& a, const std::string& b, int* error) {
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  *error = errno;
#else
  *error = ENOSYS;
#endif
  return false;
}

}  // namespace

std::vector<std::string> StagingDir::stale_staging_dirs(const std::string& dest) {
  std::string d = strip_slashes(dest);
  std::string prefix = fs::path(d).filename().string() + ".tmp-";
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(parent_of(d), ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() != prefix.size() + 6 || name.rfind(prefix, 0) != 0) continue;
    std::string p = it->path().string();
    int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    bool stale = ::flock(fd, LOCK_EX | LOCK_NB) == 0;  // a live writer holds the lock
    ::close(fd);
    if (stale) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status StagingDir::check_dest(const std::string& dest, bool replace) {
  std::string d = strip_slashes(dest);
  std::error_code ec;
  auto st = fs::symlink_status(d, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st) && !replace)
      return err("{}: exists and is not a directory (use --force to replace it)", d);
    if (fs::is_directory(st) && !fs::is_empty(d, ec) && !replace)
      return err("{}: exists and is not empty (use --force to replace it)", d);
  }
  if (!fs::is_directory(parent_of(d), ec)) return err("{}: parent directory does not exist", d);
  return ok_status();
}

Result<StagingDir> StagingDir::create(const std::string& dest, bool replace) {
  std::string d = strip_slashes(dest);
  std::error_code ec;
  TQ_CHECK_OK(check_dest(d, replace));
  // A SIGKILLed conversion cannot clean up after itself; the next one does.
  for (const std::string& stale : stale_staging_dirs(d)) fs::remove_all(stale, ec);
  std::string tmpl = d + ".tmp-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    return err("{}: cannot create staging directory: {}", tmpl, std::strerror(errno));
  int lock_fd = ::open(tmpl.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    if (lock_fd >= 0) ::close(lock_fd);
    fs::remove_all(tmpl, ec);
    return err("{}: cannot lock staging directory: {}", tmpl, std::strerror(e));
  }
  // mkdtemp makes it 0700; a published checkpoint should be readable like any new directory.
  mode_t mask = ::umask(0);
  ::umask(mask);
  fs::permissions(tmpl, static_cast<fs::perms>(0777 & ~mask), ec);
  StagingDir s;
  s.dest_ = d;
  s.staging_ = tmpl;
  s.lock_fd_ = lock_fd;
  return s;
}

StagingDir::StagingDir(StagingDir&& o) noexcept
    : dest_(std::move(o.dest_)),
      staging_(std::move(o.staging_)),
      published_(o.published_),
      lock_fd_(o.lock_fd_) {
  o.published_ = true;  // the moved-from object owns nothing
  o.lock_fd_ = -1;
}

StagingDir::~StagingDir() {
  if (!published_ && !staging_.empty()) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
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
  int xerr = 0;
  if (fs::is_directory(st) && exchange_paths(staging_, dest_, &xerr)) {
    // The staging name now holds the old directory (unlocked: stale if we die before removal).
    published_ = true;
    TQ_CHECK_OK(fsync_path(parent_of(dest_), true));
    fs::remove_all(staging_, ec);
    return ok_status();
  }
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
