// Streaming sharded safetensors writer: headers are final up front, bytes land by pwrite.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "io/json_parse.h"
#include "io/safetensors.h"

namespace tq {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kIndexName = "model.safetensors.index.json";

// Shards are written under a name no loader globs (mlx-lm loads every model*.safetensors).
std::string partial_name(const std::string& final_name) { return "." + final_name + ".partial"; }

bool is_model_shard_name(const std::string& n) {
  return n.size() >= 17 && n.rfind("model", 0) == 0 &&
         n.compare(n.size() - 12, 12, ".safetensors") == 0;
}

Status write_all(int fd, const uint8_t* p, uint64_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1ull << 30));
    ssize_t w = ::pwrite(fd, p, chunk, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return err("{}: write failed: {}", path, std::strerror(errno));
    p += w;
    n -= static_cast<uint64_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return ok_status();
}

Status fsync_dir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return err("{}: cannot open for fsync: {}", path, std::strerror(errno));
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0) return err("{}: fsync failed: {}", path, std::strerror(e));
  return ok_status();
}

}  // namespace

struct ShardedWriter::Impl {
  struct Shard {
    std::string name;  // final file name
    std::string tmp_path;
    int fd = -1;
    uint64_t data_start = 0;
    uint64_t data_bytes = 0;
    std::string header;  // padded JSON
  };
  struct Slot {
    TensorDecl decl;
    size_t shard = 0;
    uint64_t offset = 0;  // relative to the shard's data buffer
    uint64_t nbytes = 0;
    bool written = false;
  };
  std::string dir;
  ShardedWriterOptions opts;
  std::vector<Shard> shards;
  std::vector<Slot> slots;  // sorted by name
  bool finished = false;

  void abandon() {
    for (auto& s : shards) {
      if (s.fd >= 0) ::close(s.fd);
      s.fd = -1;
      if (!s.tmp_path.empty()) ::unlink(s.tmp_path.c_str());
    }
  }
};

Result<std::unique_ptr<ShardedWriter>> ShardedWriter::create(const std::string& dir,
                                                             std::vector<TensorDecl> decls,
                                                             ShardedWriterOptions opts) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return err("{}: cannot create directory: {}", dir, ec.message());
  // Refuse to mix with an existing checkpoint: a loader would glob its shards together with ours.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (is_model_shard_name(n) || n == kIndexName)
      return err("{}: already contains '{}'; write into an empty directory", dir, n);
  }
  if (ec) return err("{}: cannot list directory: {}", dir, ec.message());

  auto w = std::unique_ptr<ShardedWriter>(new ShardedWriter());
  w->impl_ = std::make_unique<Impl>();
  Impl& im = *w->impl_;
  im.dir = dir;
  im.opts = std::move(opts);

  std::sort(decls.begin(), decls.end(),
            [](const TensorDecl& a, const TensorDecl& b) { return a.name < b.name; });
  for (size_t i = 0; i < decls.size(); ++i) {
    const TensorDecl& d = decls[i];
    if (d.name.empty() || d.name == "__metadata__")
      return err("{}: invalid tensor name '{}'", dir, d.name);
    if (i > 0 && decls[i - 1].name == d.name)
      return err("{}: tensor '{}' declared twice", dir, d.name);
    uint64_t n = dtype_size(d.dtype);
    for (int64_t dim : d.shape)
      if (dim < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(dim), &n))
        return err("{}: tensor '{}' has invalid shape {}", dir, d.name, shape_str(d.shape));
    im.slots.push_back(Impl::Slot{d, 0, 0, n, false});
  }

  // Greedy assignment in name order; a tensor over the limit gets a shard of its own.
  std::vector<std::vector<size_t>> groups(1);
  uint64_t cur = 0;
  for (size_t i = 0; i < im.slots.size(); ++i) {
    uint64_t n = im.slots[i].nbytes;
    if (!groups.back().empty() && (cur + n > im.opts.max_shard_bytes || cur + n < cur)) {
      groups.emplace_back();
      cur = 0;
    }
    groups.back().push_back(i);
    cur += n;
  }

  const size_t count = groups.size();
  for (size_t s = 0; s < count; ++s) {
    Impl::Shard sh;
    sh.name = count == 1
                  ? im.opts.stem + ".safetensors"
                  : fmt::format("{}-{:05d}-of-{:05d}.safetensors", im.opts.stem, s + 1, count);
    nlohmann::json header = nlohmann::json::object();
    if (!im.opts.metadata.empty()) header["__metadata__"] = im.opts.metadata;
    uint64_t off = 0;
    for (size_t i : groups[s]) {
      Impl::Slot& sl = im.slots[i];
      sl.shard = s;
      sl.offset = off;
      header[sl.decl.name] = {{"dtype", std::string(dtype_name(sl.decl.dtype))},
                              {"shape", sl.decl.shape},
                              {"data_offsets", {off, off + sl.nbytes}}};
      off += sl.nbytes;
    }
    sh.data_bytes = off;
    try {
      sh.header = header.dump();
    } catch (const nlohmann::json::exception& e) {
      return err("{}: cannot encode header of {}: {}", dir, sh.name, e.what());
    }
    sh.header.append((8 - sh.header.size() % 8) % 8, ' ');  // data starts 8-byte aligned
    if (sh.header.size() >= kMaxHeaderBytes)
      return err("{}: header of {} too large ({} bytes)", dir, sh.name, sh.header.size());
    sh.data_start = 8 + sh.header.size();
    sh.tmp_path = (fs::path(dir) / partial_name(sh.name)).string();
    im.shards.push_back(std::move(sh));
  }

  for (auto& sh : im.shards) {
    sh.fd = ::open(sh.tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (sh.fd < 0) {
      Error e = err("{}: cannot create: {}", sh.tmp_path, std::strerror(errno));
      im.abandon();
      return e;
    }
    uint8_t len[8];
    uint64_t n = sh.header.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    Status st = write_all(sh.fd, len, 8, 0, sh.tmp_path);
    if (st.ok())
      st = write_all(sh.fd, reinterpret_cast<const uint8_t*>(sh.header.data()), n, 8, sh.tmp_path);
    if (st.ok() && ::ftruncate(sh.fd, static_cast<off_t>(sh.data_start + sh.data_bytes)) != 0)
      st = err("{}: cannot size file: {}", sh.tmp_path, std::strerror(errno));
    if (!st.ok()) {
      im.abandon();
      return st.error();
    }
  }
  return w;
}

ShardedWriter::~ShardedWriter() {
  if (impl_ && !impl_->finished) impl_->abandon();
}

Status ShardedWriter::write(const std::string& name, std::span<const uint8_t> bytes) {
  Impl& im = *impl_;
  if (im.finished) return err("{}: write of '{}' after finish", im.dir, name);
  auto it =
      std::lower_bound(im.slots.begin(), im.slots.end(), name,
                       [](const Impl::Slot& s, const std::string& n) { return s.decl.name < n; });
  if (it == im.slots.end() || it->decl.name != name)
    return err("{}: tensor '{}' was not declared", im.dir, name);
  if (it->written) return err("{}: tensor '{}' written twice", im.dir, name);
  if (bytes.size() != it->nbytes)
    return err("{}: tensor '{}' got {} bytes, declared {} {} needs {}", im.dir, name, bytes.size(),
               dtype_name(it->decl.dtype), shape_str(it->decl.shape), it->nbytes);
  const Impl::Shard& sh = im.shards[it->shard];
  TQ_CHECK_OK(
      write_all(sh.fd, bytes.data(), bytes.size(), sh.data_start + it->offset, sh.tmp_path));
  it->written = true;
  return ok_status();
}

Status ShardedWriter::finish() {
  Impl& im = *impl_;
  if (im.finished) return err("{}: finish called twice", im.dir);
  for (const auto& s : im.slots)
    if (!s.written)
      return err("{}: tensor '{}' was declared but never written", im.dir, s.decl.name);
  for (auto& sh : im.shards) {
    if (::fsync(sh.fd) != 0) return err("{}: fsync failed: {}", sh.tmp_path, std::strerror(errno));
    if (::close(sh.fd) != 0) {
      sh.fd = -1;
      return err("{}: close failed: {}", sh.tmp_path, std::strerror(errno));
    }
    sh.fd = -1;
  }
  for (size_t i = 0; i < im.shards.size(); ++i) {
    Impl::Shard& sh = im.shards[i];
    std::string final_path = (fs::path(im.dir) / sh.name).string();
    if (::rename(sh.tmp_path.c_str(), final_path.c_str()) != 0) {
      Error e = err("{}: cannot rename to {}: {}", sh.tmp_path, final_path, std::strerror(errno));
      for (size_t k = 0; k < i; ++k)  // never leave a partial set of model*.safetensors
        ::unlink((fs::path(im.dir) / im.shards[k].name).c_str());
      return e;
    }
    sh.tmp_path.clear();
  }
  im.finished = true;
  if (im.opts.write_index) {
    uint64_t total = 0;
    nlohmann::json weight_map = nlohmann::json::object();
    for (const auto& s : im.slots) {
      total += s.nbytes;
      weight_map[s.decl.name] = im.shards[s.shard].name;
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    std::string text = index.dump(4);
    std::string final_path = (fs::path(im.dir) / kIndexName).string();
    std::string tmp = (fs::path(im.dir) / partial_name(kIndexName)).string();
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return err("{}: cannot create: {}", tmp, std::strerror(errno));
    Status st = write_all(fd, reinterpret_cast<const uint8_t*>(text.data()), text.size(), 0, tmp);
    if (st.ok() && ::fsync(fd) != 0) st = err("{}: fsync failed: {}", tmp, std::strerror(errno));
    ::close(fd);
    if (st.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0)
      st = err("{}: cannot rename to {}: {}", tmp, final_path, std::strerror(errno));
    if (!st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
  }
  return fsync_dir(im.dir);
}

std::vector<std::string> ShardedWriter::shard_files() const {
  std::vector<std::string> out;
  for (const auto& sh : impl_->shards) out.push_back(sh.name);
  return out;
}

}  // namespace tq
