#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tq {

MappedFile::~MappedFile() {
  if (data_ != nullptr && size_ > 0) munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(o.data_), size_(o.size_), path_(std::move(o.path_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr && size_ > 0) munmap(const_cast<uint8_t*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return err("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return err("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return err("{}: not a regular file", path);
  }
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return err("{}: cannot map: {}", path, std::strerror(e));
    }
    m.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

void MappedFile::release(std::span<const uint8_t> part) const {
  if (data_ == nullptr || part.data() < data_ || part.size() > size_ ||
      part.data() - data_ > static_cast<ptrdiff_t>(size_ - part.size()))
    return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t lo = reinterpret_cast<uintptr_t>(part.data()), hi = lo + part.size();
  lo = (lo + page - 1) / page * page;
  hi = hi / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace tq
