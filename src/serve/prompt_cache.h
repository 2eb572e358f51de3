// The prompt cache: KV blocks of 16 prompt positions named by a hash chain (block_file.h), so
// a request whose prompt starts like an earlier one reuses its blocks instead of recomputing
// them. Memory tier: least-recently-used blocks, bounded by the caller (the server's KV budget:
// the cache yields before admission would fail). Disk tier (optional dir): evicted and flushed
// blocks written as files (temporary name, fsync, rename, fsync of the dir), verified when read
// back (a bad file is moved to dir/quarantine and counted, never served), bounded by size, LRU;
// the index is rebuilt from the files at start. Thread-safe (the server's scheduler thread
// looks up and inserts, HTTP threads flush and read counters).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "model/forward.h"
#include "model/kv_blocks.h"
#include "serve/block_file.h"

namespace tq::serve {

struct PromptCacheOptions {
  Digest fingerprint{};  // model files and the runtime arithmetic (prompt_cache_fingerprint)
  KvBlockShape shape;
  std::string dir;          // empty: memory only
  uint64_t disk_bytes = 0;  // disk bound (0: none)
  std::string version;      // written into each file
};

// Counters, cumulative since start except the sizes.
struct PromptCacheStats {
  int64_t queries = 0, hits = 0,
          hit_tokens = 0;  // lookups, those that reused blocks, tokens reused
  int64_t memory_blocks = 0, memory_bytes = 0, evictions = 0;
  int64_t disk_blocks = 0, disk_bytes = 0, disk_reads = 0, disk_writes = 0, disk_evictions = 0;
  int64_t quarantined = 0;
  int64_t interrupted = 0;  // temporary files of interrupted writes removed at start
};

// What is on disk after a flush.
struct Durable {
  int64_t blocks = 0, tokens = 0, bytes = 0, written = 0;
};

// SHA-256 of what decides a block's bits: the model's files (a file, or a directory's regular
// files: names, sizes, contents; weights, quantization, config and tokenizer) and `runtime`
// (kernel ISA, activation path, KV type).
Result<Digest> prompt_cache_fingerprint(const std::string& model_path, const std::string& runtime);

// How many of `found` cached leading blocks a prompt of `len` tokens may reuse: all but what
// leaves at least one token to compute (its logits). Prefill steps give each position the same
// bits at any chunking (SeqStep::prefill), so the chunk after the cached part may be any length.
int64_t usable_cached_blocks(int64_t found, int64_t len);

// The server's arithmetic, which tq generate --prompt-cache shares: batch invariant, and
// prepacked unless `--prepack off` (its batched steps read each strip once for all rows).
RuntimeOptions server_runtime(RuntimeOptions o);

// The runtime part of the fingerprint: what decides a block's bits besides the model's files
// (the kernels' ISA, the activation path, the KV element type, prepacked or not); the server's
// arithmetic (server_runtime) is assumed.
std::string prompt_cache_runtime(const RuntimeOptions& o);

class PromptCache {
 public:
  using Payload = std::shared_ptr<const std::vector<uint8_t>>;
  static Result<std::unique_ptr<PromptCache>> open(PromptCacheOptions o);
  ~PromptCache();

  const KvBlockShape& shape() const { return o_.shape; }
  // keys[i] names tokens [0, 16 (i + 1)): the full blocks of `tokens`.
  std::vector<Digest> chain(std::span<const int32_t> tokens) const;
  // The leading blocks present, at most max_blocks: memory first, then disk (read, verified,
  // promoted to memory while it holds fewer than promote_limit blocks; < 0: no limit); stops at
  // the first block missing or failing. use(i, bytes) sees each in turn, so a caller that
  // copies them holds one read-back block at a time. Returns how many.
  int64_t lookup_each(std::span<const int32_t> tokens, std::span<const Digest> keys,
                      int64_t max_blocks,
                      const std::function<void(int64_t, const std::vector<uint8_t>&)>& use,
                      int64_t promote_limit = -1);
  std::vector<Payload> lookup(std::span<const int32_t> tokens, std::span<const Digest> keys,
                              int64_t max_blocks);
  // One query that reused `blocks` blocks (the caller may use fewer than lookup found).
  void count_query(int64_t blocks);
  bool contains(const Digest& key) const;
  // Marks a block in memory as recently used; false when it is not there.
  bool touch(const Digest& key);
  bool has_disk() const { return !o_.dir.empty(); }
  // Block i of `tokens` (key keys[i]) as the most recently used; a no-op when present.
  void insert(std::span<const int32_t> tokens, std::span<const Digest> keys, int64_t i,
              Payload bytes);
  // Drops least recently used blocks from memory until `keep` remain (dirty ones written to
  // disk first when there is a dir).
  void evict_to(int64_t keep);
  int64_t memory_blocks() const;
  // Writes every dirty block; answers what is on disk now.
  Result<Durable> flush();
  PromptCacheStats stats() const;

 private:
  struct Entry {
    Digest parent{};
    std::array<int32_t, kBlockTokens> tokens{};
    Payload bytes;
    bool dirty = true;  // not on disk yet
    std::list<Digest>::iterator lru;
  };
  struct DiskEntry {
    uint64_t bytes = 0;
    std::list<Digest>::iterator lru;
  };
  struct Dirty {
    Digest key, parent;
    std::array<int32_t, kBlockTokens> tokens;
    Payload bytes;
  };
  explicit PromptCache(PromptCacheOptions o) : o_(std::move(o)), root_(root_key(o_.fingerprint)) {}
  Status rebuild_index();
  std::string file_of(const Digest& key) const;
  // Disk side (disk_mu_ held).
  Status write_files(std::span<const Dirty> blocks);
  Payload read_file(const Digest& key, const Digest& parent);
  void quarantine(const Digest& key, const std::string& why);
  void disk_touch(const Digest& key);
  void disk_bound();

  PromptCacheOptions o_;
  Digest root_;
  mutable std::mutex mu_;  // the memory tier
  std::map<Digest, Entry> mem_;
  std::list<Digest> lru_;  // front: least recently used
  std::mutex disk_mu_;     // the disk tier; mu_ may be taken under it, never the reverse
  std::map<Digest, DiskEntry> disk_;
  std::list<Digest> disk_lru_;
  uint64_t disk_total_ = 0;
  uint64_t tmp_counter_ = 0;
  struct Counters {
    std::atomic<int64_t> queries{0}, hits{0}, hit_tokens{0}, evictions{0}, disk_reads{0},
        disk_writes{0}, disk_evictions{0}, quarantined{0}, disk_blocks{0}, disk_bytes{0},
        interrupted{0};
  };
  Counters c_;
};

}  // namespace tq::serve
