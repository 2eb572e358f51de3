#include "serve/prompt_cache.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "../testing/test_files.h"

namespace tq::serve {
namespace {

namespace fs = std::filesystem;

// A small block shape: 2 layers, 2 KV heads of 4, f16 (512 bytes).
const KvBlockShape kShape{2, 2, 4, 2};

Digest fingerprint(uint8_t v) {
  Digest d{};
  d.fill(v);
  return d;
}

std::vector<int32_t> tokens(int64_t n, int32_t salt = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(i * 7 + salt);
  return t;
}

PromptCache::Payload payload(int64_t b, int salt = 0) {
  auto p = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(kShape.bytes()));
  for (size_t i = 0; i < p->size(); ++i) (*p)[i] = static_cast<uint8_t>(i * 13 + b * 3 + salt);
  return p;
}

std::unique_ptr<PromptCache> open_cache(const std::string& dir, uint8_t fp = 1, uint64_t disk = 0) {
  auto c = PromptCache::open({fingerprint(fp), kShape, dir, disk, "test"});
  EXPECT_TRUE(c.ok()) << c.error().message;
  return c.ok() ? std::move(c).value() : nullptr;
}

// Puts the full blocks of t into c.
void fill(PromptCache& c, std::span<const int32_t> t) {
  const auto keys = c.chain(t);
  for (size_t b = 0; b < keys.size(); ++b) c.insert(t, keys, static_cast<int64_t>(b), payload(b));
}

std::vector<fs::path> block_files(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".blk") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PromptCacheChain, KeysNameTheWholePrefixOnOneModel) {
  auto a = open_cache(""), b = open_cache("", 2);
  auto t = tokens(50), u = t;
  u[20] += 1;  // differs in block 1
  const auto ka = a->chain(t), ku = a->chain(u), kb = b->chain(t);
  ASSERT_EQ(ka.size(), 3u);  // full blocks only
  EXPECT_EQ(ka[0], ku[0]);
  EXPECT_NE(ka[1], ku[1]);
  EXPECT_NE(ka[2], ku[2]);  // a later block differs when an earlier one does
  for (size_t i = 0; i < ka.size(); ++i) EXPECT_NE(ka[i], kb[i]) << "other fingerprint";
  EXPECT_EQ(a->chain(std::span(t).first(48)), ka);
  EXPECT_EQ(a->chain(std::span(t).first(47)).size(), 2u);
}

TEST(PromptCacheFingerprint, TheServersArithmeticIsPrepackedUnlessTurnedOff) {
  RuntimeOptions o;
  const RuntimeOptions s = server_runtime(o);
  EXPECT_TRUE(s.batch_invariant);
  EXPECT_EQ(s.prepack, Prepack::kOn);
  RuntimeOptions on = o, off = o;
  on.prepack = Prepack::kOn, off.prepack = Prepack::kOff;
  EXPECT_EQ(server_runtime(off).prepack, Prepack::kOff);
  // Blocks of the default server, of --prepack on and of --prepack off: two arithmetics.
  EXPECT_EQ(prompt_cache_runtime(o), prompt_cache_runtime(on));
  EXPECT_NE(prompt_cache_runtime(o), prompt_cache_runtime(off));
  // --prepack 4bit: a third arithmetic (4-bit matrices on the lanes, the others not).
  RuntimeOptions four = o;
  four.prepack = Prepack::kFourBit;
  EXPECT_EQ(server_runtime(four).prepack, Prepack::kFourBit);
  EXPECT_NE(prompt_cache_runtime(four), prompt_cache_runtime(on));
  EXPECT_NE(prompt_cache_runtime(four), prompt_cache_runtime(off));
}

TEST(PromptCacheChain, UsableBlocksLeaveATokenToCompute) {
  EXPECT_EQ(usable_cached_blocks(9, 150), 9);   // 144..149 computed
  EXPECT_EQ(usable_cached_blocks(9, 145), 9);   // 144 alone: a one-token prefill step
  EXPECT_EQ(usable_cached_blocks(20, 160), 9);  // 144..159
  EXPECT_EQ(usable_cached_blocks(2, 33), 2);
  EXPECT_EQ(usable_cached_blocks(1, 16), 0);  // the last token's logits are wanted
  EXPECT_EQ(usable_cached_blocks(1, 17), 1);
  EXPECT_EQ(usable_cached_blocks(0, 100), 0);
}

TEST(PromptCacheMemory, LookupFindsLeadingBlocksAndEvictsLeastRecentlyUsed) {
  auto c = open_cache("");
  const auto t = tokens(64), u = tokens(64, 1);
  fill(*c, t);
  EXPECT_EQ(c->memory_blocks(), 4);
  auto got = c->lookup(t, c->chain(t), 3);
  ASSERT_EQ(got.size(), 3u);
  for (int b = 0; b < 3; ++b) EXPECT_EQ(*got[b], *payload(b));
  auto v = t;
  v[40] = 999;  // block 2 differs
  EXPECT_EQ(c->lookup(v, c->chain(v), 4).size(), 2u);
  EXPECT_TRUE(c->lookup(u, c->chain(u), 4).empty());
  fill(*c, u);
  (void)c->lookup(t, c->chain(t), 4);  // t's blocks now the most recently used
  c->evict_to(4);
  EXPECT_EQ(c->memory_blocks(), 4);
  EXPECT_EQ(c->lookup(t, c->chain(t), 4).size(), 4u);
  EXPECT_TRUE(c->lookup(u, c->chain(u), 4).empty());
  c->count_query(2);
  c->count_query(0);
  const auto s = c->stats();
  EXPECT_EQ(s.queries, 2);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.hit_tokens, 32);
  EXPECT_EQ(s.evictions, 4);
  EXPECT_EQ(s.memory_bytes, 4 * kShape.bytes());
}

TEST(PromptCacheDisk, FlushedBlocksAreFoundAfterReopening) {
  testing::TempDir dir;
  const auto t = tokens(80);
  {
    auto c = open_cache(dir.path());
    fill(*c, t);
    auto d = c->flush();
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ(d->blocks, 5);
    EXPECT_EQ(d->tokens, 80);
    EXPECT_EQ(d->written, 5);
    EXPECT_EQ(c->flush()->written, 0);  // nothing dirty
  }
  // A leftover of an interrupted write is removed at start.
  testing::write_file(dir.file(std::string(64, 'a') + ".blk.tmp.1.1"), "partial");
  auto c = open_cache(dir.path());
  EXPECT_FALSE(fs::exists(dir.file(std::string(64, 'a') + ".blk.tmp.1.1")));
  EXPECT_EQ(c->stats().disk_blocks, 5);
  EXPECT_EQ(c->memory_blocks(), 0);
  auto got = c->lookup(t, c->chain(t), 5);
  ASSERT_EQ(got.size(), 5u);
  for (int b = 0; b < 5; ++b) EXPECT_EQ(*got[b], *payload(b));
  EXPECT_EQ(c->stats().disk_reads, 5);
  EXPECT_EQ(c->memory_blocks(), 5);  // promoted
}

TEST(PromptCacheDisk, EvictedBlocksGoToDiskAndDiskIsBounded) {
  testing::TempDir dir;
  const auto t = tokens(64);
  const int64_t file = static_cast<int64_t>(fs::file_size([&] {
    auto c = open_cache(dir.path());
    fill(*c, std::span(t).first(16));
    (void)c->flush();
    return block_files(dir.path()).at(0);
  }()));
  fs::remove(block_files(dir.path()).at(0));
  auto c = open_cache(dir.path(), 1, static_cast<uint64_t>(3 * file));
  fill(*c, t);
  c->evict_to(0);                        // written on the way out
  EXPECT_EQ(c->stats().disk_blocks, 3);  // the bound: the oldest file went
  EXPECT_EQ(c->stats().disk_evictions, 1);
  EXPECT_TRUE(c->lookup(t, c->chain(t), 4).empty());  // block 0 was the oldest
}

// Every kind of bad file is quarantined, counted, and never served; the lookup stops there.
TEST(PromptCacheDisk, BadFilesAreQuarantinedNeverServed) {
  const auto t = tokens(48);
  for (const std::string kind : {"flipped", "truncated", "other model", "renamed"}) {
    SCOPED_TRACE(kind);
    testing::TempDir dir;
    {
      auto c = open_cache(dir.path());
      fill(*c, t);
      ASSERT_TRUE(c->flush().ok());
    }
    auto c = open_cache(dir.path());
    const auto keys = c->chain(t);
    const std::string victim = dir.file(digest_hex(keys[1]) + ".blk");
    std::string bytes = testing::read_file(victim);
    if (kind == "flipped") {
      bytes[bytes.size() / 2] ^= 0x10;
    } else if (kind == "truncated") {
      bytes.resize(bytes.size() - 100);
    } else if (kind == "other model") {  // a valid file of another fingerprint, same tokens
      testing::TempDir other;
      auto o = open_cache(other.path(), 9);
      fill(*o, t);
      ASSERT_TRUE(o->flush().ok());
      bytes = testing::read_file(other.file(digest_hex(o->chain(t)[1]) + ".blk"));
    } else {  // block 2's valid file under block 1's name
      bytes = testing::read_file(dir.file(digest_hex(keys[2]) + ".blk"));
    }
    testing::write_file(victim, bytes);
    auto got = c->lookup(t, keys, 3);
    EXPECT_EQ(got.size(), 1u);
    EXPECT_EQ(c->stats().quarantined, 1);
    EXPECT_FALSE(fs::exists(victim));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir.file("quarantine")), {}), 1);
  }
}

TEST(BlockFile, RoundTripsAndRejectsEveryDamage) {
  BlockHeader h;
  h.fingerprint = fingerprint(3);
  h.parent = root_key(h.fingerprint);
  const auto t = tokens(16);
  std::copy(t.begin(), t.end(), h.tokens.begin());
  h.key = block_key(h.parent, t);
  h.layers = 2, h.kv_heads = 2, h.head_dim = 4;
  h.version = "1.2.3";
  const auto p = payload(0);
  const std::vector<uint8_t> file = encode_block_file(h, *p);
  auto parsed = parse_block_file(file);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->header.key, h.key);
  EXPECT_EQ(parsed->header.version, "1.2.3");
  EXPECT_EQ(parsed->header.payload_bytes, p->size());
  EXPECT_TRUE(std::equal(parsed->payload.begin(), parsed->payload.end(), p->begin(), p->end()));
  for (size_t i = 0; i < file.size(); i += 7) {  // any flipped byte
    auto bad = file;
    bad[i] ^= 0x01;
    EXPECT_FALSE(parse_block_file(bad).ok()) << "byte " << i;
  }
  for (size_t n : {size_t{0}, size_t{8}, size_t{100}, file.size() - 1})
    EXPECT_FALSE(parse_block_file(std::span(file).first(n)).ok()) << n << " bytes";
  auto longer = file;
  longer.push_back(0);
  EXPECT_FALSE(parse_block_file(longer).ok());
}

}  // namespace
}  // namespace tq::serve

namespace tq::serve {
namespace {

// The cache is refused (the server logs why and runs without it) for the reference runtime's
// rows and for models with recurrent state.
TEST(KvBlockShape, OnlyFastLayoutsWithoutRecurrentState) {
  ModelConfig cfg;
  cfg.num_hidden_layers = 2, cfg.num_key_value_heads = 2, cfg.head_dim = 4;
  KvCache c;
  c.capacity = 16;
  c.layout = KvLayout::kFastF16;
  c.k16.assign(2 * 8 * 16, 0), c.v16.assign(2 * 8 * 16, 0);
  auto s = kv_block_shape(c, cfg);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->bytes(), 2 * 2 * 8 * 16 * 2);
  c.conv.assign(4, 0.0f);  // a DeltaNet layer's state
  EXPECT_FALSE(kv_block_shape(c, cfg).ok());
  c.conv.clear();
  c.layout = KvLayout::kRows;
  EXPECT_FALSE(kv_block_shape(c, cfg).ok());
}

}  // namespace
}  // namespace tq::serve
