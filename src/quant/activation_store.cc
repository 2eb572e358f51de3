#include "quant/activation_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace tq {

ActivationStore::~ActivationStore() {
  if (fd_ >= 0) ::close(fd_);
}

ActivationStore::ActivationStore(ActivationStore&& o) noexcept
    : rows_(o.rows_), width_(o.width_), mem_(std::move(o.mem_)), fd_(o.fd_), path_(o.path_) {
  o.fd_ = -1;
}

ActivationStore& ActivationStore::operator=(ActivationStore&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    rows_ = o.rows_;
    width_ = o.width_;
    mem_ = std::move(o.mem_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

Result<ActivationStore> ActivationStore::create(int64_t rows, int64_t width, bool in_memory,
                                                const std::string& scratch_dir) {
  int64_t n = 0;
  if (rows < 0 || width < 0 || __builtin_mul_overflow(rows, width, &n) || n > (int64_t{1} << 40))
    return err("activations: bad size [{}, {}]", rows, width);
  ActivationStore s;
  s.rows_ = rows;
  s.width_ = width;
  if (in_memory) {
    s.mem_.assign(static_cast<size_t>(n), 0.0f);
    return s;
  }
  std::string dir = scratch_dir;
  if (dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    dir = t && *t ? t : "/tmp";
  }
  std::string tmpl = dir + "/tq_calib_XXXXXX";
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return err("{}: cannot create scratch file: {}", tmpl, std::strerror(errno));
  ::unlink(tmpl.c_str());  // removed when closed, even if the process is killed
  s.fd_ = fd;
  s.path_ = tmpl;
  if (::ftruncate(fd, n * 4) != 0)
    return err("{}: cannot size scratch file to {} bytes: {}", tmpl, n * 4, std::strerror(errno));
  return s;
}

Status ActivationStore::write_row(int64_t r, std::span<const float> data) {
  if (r < 0 || r >= rows_ || static_cast<int64_t>(data.size()) != width_)
    return err("activations: row {} of {} (width {}, {} given)", r, rows_, width_, data.size());
  if (fd_ < 0) {
    std::memcpy(mem_.data() + r * width_, data.data(), data.size() * 4);
    return ok_status();
  }
  const char* p = reinterpret_cast<const char*>(data.data());
  size_t left = data.size() * 4;
  off_t off = static_cast<off_t>(r * width_ * 4);
  while (left > 0) {
    const ssize_t k = ::pwrite(fd_, p, left, off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return err("{}: write failed: {}", path_, std::strerror(errno));
    p += k;
    left -= static_cast<size_t>(k);
    off += k;
  }
  return ok_status();
}

Status ActivationStore::read_row(int64_t r, std::span<float> data) const {
  if (r < 0 || r >= rows_ || static_cast<int64_t>(data.size()) != width_)
    return err("activations: row {} of {} (width {}, {} asked)", r, rows_, width_, data.size());
  if (fd_ < 0) {
    std::memcpy(data.data(), mem_.data() + r * width_, data.size() * 4);
    return ok_status();
  }
  char* p = reinterpret_cast<char*>(data.data());
  size_t left = data.size() * 4;
  off_t off = static_cast<off_t>(r * width_ * 4);
  while (left > 0) {
    const ssize_t k = ::pread(fd_, p, left, off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return err("{}: read failed: {}", path_, std::strerror(errno));
    p += k;
    left -= static_cast<size_t>(k);
    off += k;
  }
  return ok_status();
}

}  // namespace tq
