#include "serve/prompt_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>

#include <fmt/format.h>

#include "base/file_digest.h"
#include "base/sha256.h"
#include "kernels/packed_matmul.h"

namespace tq::serve {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSuffix = ".blk";

bool is_hex_name(const std::string& name, Digest* d) {
  if (name.size() != 64 + std::strlen(kSuffix) || !name.ends_with(kSuffix)) return false;
  for (int i = 0; i < 32; ++i) {
    unsigned v = 0;
    if (std::sscanf(name.c_str() + 2 * i, "%2x", &v) != 1) return false;
    const char a = name[2 * i], b = name[2 * i + 1];
    auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
    if (!hex(a) || !hex(b)) return false;
    (*d)[i] = static_cast<uint8_t>(v);
  }
  return true;
}

Status write_all(int fd, const std::vector<uint8_t>& b, const std::string& path) {
  size_t done = 0;
  while (done < b.size()) {
    const ssize_t n = ::write(fd, b.data() + done, b.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return err("cannot write {}: {}", path, std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return ok_status();
}

bool read_whole(const std::string& path, std::vector<uint8_t>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  bool ok = size >= 0 && ::lseek(fd, 0, SEEK_SET) == 0;
  if (ok) out->resize(static_cast<size_t>(size));
  size_t done = 0;
  while (ok && done < out->size()) {
    const ssize_t n = ::read(fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // shorter than it was: parsing refuses it
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  ::close(fd);
  return ok;
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return err("cannot open {}: {}", dir, std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return err("cannot fsync {}: {}", dir, std::strerror(errno));
  return ok_status();
}

}  // namespace

int64_t usable_cached_blocks(int64_t found, int64_t len) {
  return std::max<int64_t>(0, std::min(found, (len - 1) / kBlockTokens));
}

RuntimeOptions server_runtime(RuntimeOptions o) {
  o.batch_invariant = true;
  if (o.prepack == Prepack::kAuto) o.prepack = Prepack::kOn;
  return o;
}

std::string prompt_cache_runtime(const RuntimeOptions& o) {
  const Prepack p = server_runtime(o).prepack;
  return fmt::format("isa={} act={} kv={} prepack={}", packed_kernel_isa(),
                     o.activations == ActPath::kF32 ? "f32" : "int8",
                     o.kv_cache == KvType::kF16 ? "f16" : "f32",
                     p == Prepack::kOn        ? "on"
                     : p == Prepack::kFourBit ? "4bit"
                                              : "off");
}

Result<Digest> prompt_cache_fingerprint(const std::string& model_path, const std::string& runtime) {
  Sha256 h;
  h.update("tq prompt cache v1\n");
  h.update(runtime);
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) {
    for (const auto& e : fs::directory_iterator(model_path, ec))
      if (e.is_regular_file() && !e.path().filename().string().starts_with("."))
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(model_path);
  }
  if (ec) return err("cannot list {}: {}", model_path, ec.message());
  // Contents through the fast checksum: SHA-256 of a 1B model's files would take seconds at
  // every start.
  for (const auto& f : files) {
    h.update("\n" + f.filename().string() + "\n");
    TQ_CHECK_OK(hash_file_contents(f.string(), h));
  }
  return h.digest();
}

Result<std::unique_ptr<PromptCache>> PromptCache::open(PromptCacheOptions o) {
  std::unique_ptr<PromptCache> c(new PromptCache(std::move(o)));
  if (!c->o_.dir.empty()) TQ_CHECK_OK(c->rebuild_index());
  return c;
}

PromptCache::~PromptCache() = default;

// The files are the index: leftovers of an interrupted write are removed, the rest listed
// (verified only when read), oldest first by modification time.
Status PromptCache::rebuild_index() {
  std::error_code ec;
  fs::create_directories(fs::path(o_.dir) / "quarantine", ec);
  if (ec) return err("--prompt-cache-dir {}: {}", o_.dir, ec.message());
  struct Found {
    fs::file_time_type t;
    Digest key;
    uint64_t bytes;
  };
  std::vector<Found> found;
  for (const auto& e : fs::directory_iterator(o_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file()) continue;
    if (name.find(".tmp.") != std::string::npos) {
      fs::remove(e.path(), ec);
      ++c_.interrupted;
      continue;
    }
    Digest d{};
    if (!is_hex_name(name, &d)) continue;
    found.push_back({e.last_write_time(ec), d, e.file_size(ec)});
  }
  if (ec) return err("--prompt-cache-dir {}: {}", o_.dir, ec.message());
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.t < b.t; });
  for (const auto& f : found) {
    disk_lru_.push_back(f.key);
    disk_[f.key] = {f.bytes, std::prev(disk_lru_.end())};
    disk_total_ += f.bytes;
  }
  c_.disk_blocks = static_cast<int64_t>(disk_.size());
  c_.disk_bytes = static_cast<int64_t>(disk_total_);
  disk_bound();
  return ok_status();
}

std::string PromptCache::file_of(const Digest& key) const {
  return (fs::path(o_.dir) / (digest_hex(key) + kSuffix)).string();
}

std::vector<Digest> PromptCache::chain(std::span<const int32_t> tokens) const {
  std::vector<Digest> keys;
  Digest parent = root_;
  for (size_t i = 0; i + kBlockTokens <= tokens.size(); i += kBlockTokens) {
    parent = block_key(parent, tokens.subspan(i, kBlockTokens));
    keys.push_back(parent);
  }
  return keys;
}

std::vector<PromptCache::Payload> PromptCache::lookup(std::span<const int32_t> tokens,
                                                      std::span<const Digest> keys,
                                                      int64_t max_blocks) {
  std::vector<Payload> out;
  lookup_each(tokens, keys, max_blocks, [&](int64_t, const std::vector<uint8_t>& b) {
    out.push_back(std::make_shared<const std::vector<uint8_t>>(b));
  });
  return out;
}

int64_t PromptCache::lookup_each(
    std::span<const int32_t> tokens, std::span<const Digest> keys, int64_t max_blocks,
    const std::function<void(int64_t, const std::vector<uint8_t>&)>& use, int64_t promote_limit) {
  const int64_t n = std::min<int64_t>(max_blocks, static_cast<int64_t>(keys.size()));
  for (int64_t i = 0; i < n; ++i) {
    const Digest& key = keys[i];
    Payload p;
    {
      std::lock_guard lock(mu_);
      auto it = mem_.find(key);
      if (it != mem_.end()) {
        lru_.splice(lru_.end(), lru_, it->second.lru);
        p = it->second.bytes;
      }
    }
    if (!p) {
      if (o_.dir.empty()) return i;
      {
        std::lock_guard lock(disk_mu_);
        p = read_file(key, i == 0 ? root_ : keys[i - 1]);
      }
      if (!p) return i;
      ++c_.disk_reads;
      std::lock_guard lock(mu_);  // promoted (on disk already, so not dirty) while there is room
      const bool room = promote_limit < 0 || static_cast<int64_t>(mem_.size()) < promote_limit;
      if (room && !mem_.contains(key)) {
        Entry e;
        e.parent = i == 0 ? root_ : keys[i - 1];
        std::copy_n(tokens.begin() + i * kBlockTokens, kBlockTokens, e.tokens.begin());
        e.bytes = p;
        e.dirty = false;
        lru_.push_back(key);
        e.lru = std::prev(lru_.end());
        mem_.emplace(key, std::move(e));
      }
    }
    use(i, *p);
  }
  return n;
}

void PromptCache::count_query(int64_t blocks) {
  ++c_.queries;
  if (blocks > 0) {
    ++c_.hits;
    c_.hit_tokens += blocks * kBlockTokens;
  }
}

bool PromptCache::contains(const Digest& key) const {
  std::lock_guard lock(mu_);
  return mem_.contains(key);
}

bool PromptCache::touch(const Digest& key) {
  std::lock_guard lock(mu_);
  auto it = mem_.find(key);
  if (it == mem_.end()) return false;
  lru_.splice(lru_.end(), lru_, it->second.lru);
  return true;
}

void PromptCache::insert(std::span<const int32_t> tokens, std::span<const Digest> keys, int64_t i,
                         Payload bytes) {
  std::lock_guard lock(mu_);
  const Digest& key = keys[i];
  if (auto it = mem_.find(key); it != mem_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru);
    return;
  }
  Entry e;
  e.parent = i == 0 ? root_ : keys[i - 1];
  std::copy_n(tokens.begin() + i * kBlockTokens, kBlockTokens, e.tokens.begin());
  e.bytes = std::move(bytes);
  e.dirty = !o_.dir.empty();
  lru_.push_back(key);
  e.lru = std::prev(lru_.end());
  mem_.emplace(key, std::move(e));
}

void PromptCache::evict_to(int64_t keep) {
  std::vector<Dirty> dirty;
  {
    std::lock_guard lock(mu_);
    while (static_cast<int64_t>(mem_.size()) > std::max<int64_t>(keep, 0)) {
      auto it = mem_.find(lru_.front());
      lru_.pop_front();
      if (it->second.dirty)
        dirty.push_back({it->first, it->second.parent, it->second.tokens, it->second.bytes});
      mem_.erase(it);
      ++c_.evictions;
    }
  }
  if (dirty.empty()) return;
  std::lock_guard lock(disk_mu_);
  if (Status st = write_files(dirty); !st.ok())
    std::fprintf(stderr, "tq: prompt cache: %s\n", st.error().message.c_str());
}

int64_t PromptCache::memory_blocks() const {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(mem_.size());
}

Result<Durable> PromptCache::flush() {
  Durable d;
  if (o_.dir.empty()) return d;
  std::vector<Dirty> dirty;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, e] : mem_)
      if (e.dirty) dirty.push_back({key, e.parent, e.tokens, e.bytes});
  }
  std::lock_guard lock(disk_mu_);
  TQ_CHECK_OK(write_files(dirty));
  {
    std::lock_guard mlock(mu_);
    for (const auto& b : dirty)
      if (auto it = mem_.find(b.key); it != mem_.end()) it->second.dirty = false;
  }
  d.blocks = static_cast<int64_t>(disk_.size());
  d.tokens = d.blocks * kBlockTokens;
  d.bytes = static_cast<int64_t>(disk_total_);
  d.written = static_cast<int64_t>(dirty.size());
  return d;
}

// Each file: a temporary name, written and fsynced, renamed; then the directory fsynced once,
// after which they are durable (an interrupted write leaves a temporary file, removed at start).
Status PromptCache::write_files(std::span<const Dirty> blocks) {
  if (blocks.empty()) return ok_status();
  std::vector<std::pair<Digest, uint64_t>> done;
  for (const Dirty& b : blocks) {
    if (disk_.contains(b.key)) continue;
    BlockHeader h;
    h.fingerprint = o_.fingerprint;
    h.key = b.key;
    h.parent = b.parent;
    h.tokens = b.tokens;
    h.kv_type = o_.shape.elem_bytes == 2 ? 0 : 1;
    h.layers = static_cast<uint32_t>(o_.shape.layers);
    h.kv_heads = static_cast<uint32_t>(o_.shape.kv_heads);
    h.head_dim = static_cast<uint32_t>(o_.shape.head_dim);
    h.version = o_.version;
    const std::vector<uint8_t> file = encode_block_file(h, *b.bytes);
    const std::string path = file_of(b.key);
    const std::string tmp =
        path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++tmp_counter_);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return err("cannot create {}: {}", tmp, std::strerror(errno));
    Status st = write_all(fd, file, tmp);
    if (st.ok() && ::fsync(fd) != 0) st = err("cannot fsync {}: {}", tmp, std::strerror(errno));
    ::close(fd);
    if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
      st = err("cannot rename {}: {}", tmp, std::strerror(errno));
    if (!st.ok()) {
      std::remove(tmp.c_str());
      return st;
    }
    done.emplace_back(b.key, file.size());
  }
  TQ_CHECK_OK(fsync_dir(o_.dir));
  for (const auto& [key, bytes] : done) {
    disk_lru_.push_back(key);
    disk_[key] = {bytes, std::prev(disk_lru_.end())};
    disk_total_ += bytes;
    ++c_.disk_writes;
  }
  disk_bound();
  c_.disk_blocks = static_cast<int64_t>(disk_.size());
  c_.disk_bytes = static_cast<int64_t>(disk_total_);
  return ok_status();
}

void PromptCache::disk_bound() {
  while (o_.disk_bytes > 0 && disk_total_ > o_.disk_bytes && !disk_lru_.empty()) {
    const Digest key = disk_lru_.front();
    disk_lru_.pop_front();
    auto it = disk_.find(key);
    disk_total_ -= it->second.bytes;
    disk_.erase(it);
    std::remove(file_of(key).c_str());
    ++c_.disk_evictions;
  }
  c_.disk_blocks = static_cast<int64_t>(disk_.size());
  c_.disk_bytes = static_cast<int64_t>(disk_total_);
}

void PromptCache::disk_touch(const Digest& key) {
  auto it = disk_.find(key);
  if (it != disk_.end()) disk_lru_.splice(disk_lru_.end(), disk_lru_, it->second.lru);
}

PromptCache::Payload PromptCache::read_file(const Digest& key, const Digest& parent) {
  if (!disk_.contains(key)) return nullptr;
  const std::string path = file_of(key);
  std::vector<uint8_t> bytes;
  if (!read_whole(path, &bytes)) {  // gone behind our back: forget it
    disk_total_ -= disk_[key].bytes;
    disk_lru_.erase(disk_[key].lru);
    disk_.erase(key);
    c_.disk_blocks = static_cast<int64_t>(disk_.size());
    c_.disk_bytes = static_cast<int64_t>(disk_total_);
    return nullptr;
  }
  auto parsed = parse_block_file(bytes);
  std::string why;
  if (!parsed.ok()) {
    why = parsed.error().message;
  } else {
    const BlockHeader& h = parsed->header;
    if (h.fingerprint != o_.fingerprint)
      why = "made by another model or runtime (fingerprint differs)";
    else if (h.key != key || h.parent != parent)
      why = "its key is not the one its name says";
    else if (h.payload_bytes != static_cast<uint64_t>(o_.shape.bytes()) ||
             h.layers != o_.shape.layers || h.kv_heads != o_.shape.kv_heads ||
             h.head_dim != o_.shape.head_dim || (h.kv_type == 0) != (o_.shape.elem_bytes == 2))
      why = "its KV shape differs";
  }
  if (!why.empty()) {
    quarantine(key, why);
    return nullptr;
  }
  disk_touch(key);
  return std::make_shared<const std::vector<uint8_t>>(parsed->payload.begin(),
                                                      parsed->payload.end());
}

void PromptCache::quarantine(const Digest& key, const std::string& why) {
  const std::string path = file_of(key);
  const std::string to = (fs::path(o_.dir) / "quarantine" /
                          (digest_hex(key) + kSuffix + "." + std::to_string(::getpid()) + "." +
                           std::to_string(++tmp_counter_)))
                             .string();
  if (std::rename(path.c_str(), to.c_str()) != 0) std::remove(path.c_str());
  std::fprintf(stderr, "tq: prompt cache: %s quarantined: %s\n", path.c_str(), why.c_str());
  auto it = disk_.find(key);
  disk_total_ -= it->second.bytes;
  disk_lru_.erase(it->second.lru);
  disk_.erase(it);
  ++c_.quarantined;
  c_.disk_blocks = static_cast<int64_t>(disk_.size());
  c_.disk_bytes = static_cast<int64_t>(disk_total_);
}

PromptCacheStats PromptCache::stats() const {
  PromptCacheStats s;
  s.queries = c_.queries;
  s.hits = c_.hits;
  s.hit_tokens = c_.hit_tokens;
  s.evictions = c_.evictions;
  s.disk_reads = c_.disk_reads;
  s.disk_writes = c_.disk_writes;
  s.disk_evictions = c_.disk_evictions;
  s.quarantined = c_.quarantined;
  s.interrupted = c_.interrupted;
  s.disk_blocks = c_.disk_blocks;
  s.disk_bytes = c_.disk_bytes;
  s.memory_blocks = memory_blocks();
  s.memory_bytes = s.memory_blocks * o_.shape.bytes();
  return s;
}

}  // namespace tq::serve
