#include "base/file_digest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/fast_hash.h"

namespace tq {

Status hash_file_contents(const std::string& path, Sha256& h) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return err("{}: cannot open: {}", path, std::strerror(errno));
  std::vector<uint8_t> buf(8 << 20);
  uint64_t size = 0;
  for (;;) {
    size_t got = 0;
    while (got < buf.size()) {
      const ssize_t r = ::read(fd, buf.data() + got, buf.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        const int e = errno;
        ::close(fd);
        return err("{}: read failed at offset {}: {}", path, size + got, std::strerror(e));
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    if (got == 0) break;
    const std::span<const uint8_t> piece(buf.data(), got);
    const uint64_t sums[2] = {fast_hash64(piece, 1), fast_hash64(piece, 2)};
    h.update({reinterpret_cast<const uint8_t*>(sums), sizeof(sums)});
    size += got;
    if (got < buf.size()) break;
  }
  ::close(fd);
  h.update("\nsize " + std::to_string(size) + "\n");
  return ok_status();
}

}  // namespace tq
