#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "../testing/test_files.h"
#include "io/json_parse.h"
#include "io/safetensors.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using testing::as_bytes;
using testing::contains;

std::vector<std::string> dir_listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& de : fs::directory_iterator(dir)) names.push_back(de.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// Deterministic bytes for a tensor, different per name.
std::vector<uint8_t> fill(const TensorDecl& d) {
  std::vector<uint8_t> v(d.nbytes());
  uint8_t seed = static_cast<uint8_t>(std::hash<std::string>{}(d.name));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(seed + 7 * i);
  return v;
}

std::vector<TensorDecl> sample_decls() {
  return {{"model.norm.weight", DType::kF32, {5}},
          {"model.embed_tokens.weight", DType::kBF16, {7, 3}},
          {"lm_head.scales", DType::kU8, {3, 1}},
          {"a.scalar", DType::kF16, {}},
          {"empty", DType::kU32, {0, 4}}};
}

TEST(ShardedWriter, WritesOneShardWithIndexInAnyOrder) {
  testing::TempDir tmp;
  auto decls = sample_decls();
  auto w = ShardedWriter::create(tmp.path(), decls);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ((*w)->shard_files(), std::vector<std::string>{"model.safetensors"});
  // Nothing named model*.safetensors exists before finish().
  for (const auto& n : dir_listing(tmp.path())) EXPECT_NE(n.rfind("model", 0), 0u) << n;
  for (auto it = decls.rbegin(); it != decls.rend(); ++it)
    ASSERT_TRUE((*w)->write(it->name, fill(*it)).ok());
  Status st = (*w)->finish();
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(dir_listing(tmp.path()),
            (std::vector<std::string>{"model.safetensors", "model.safetensors.index.json"}));

  std::string raw = testing::read_file(tmp.file("model.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header = raw.substr(8, n);
  EXPECT_EQ(header[0], '{');
  size_t close = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos);  // space padding
  EXPECT_TRUE(contains(header, R"("__metadata__":{"format":"mlx"})"));

  auto f = SafetensorsFile::open(tmp.file("model.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->entries().size(), decls.size());
  uint64_t prev_end = 0;
  for (const auto& e : f->entries()) {  // name order == offset order
    EXPECT_EQ(e.begin, prev_end);
    prev_end = e.end;
  }
  for (const auto& d : decls) {
    const SafetensorsEntry* e = f->find(d.name);
    ASSERT_NE(e, nullptr) << d.name;
    EXPECT_EQ(e->dtype, d.dtype);
    EXPECT_EQ(e->shape, d.shape);
    auto want = fill(d);
    auto got = f->data(*e);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << d.name;
  }

  auto idx = read_json_file(tmp.file("model.safetensors.index.json"));
  ASSERT_TRUE(idx.ok());
  uint64_t total = 0;
  for (const auto& d : decls) total += d.nbytes();
  EXPECT_EQ((*idx)["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ((*idx)["weight_map"].size(), decls.size());
  EXPECT_EQ((*idx)["weight_map"]["lm_head.scales"], "model.safetensors");
  EXPECT_TRUE(contains(testing::read_file(tmp.file("model.safetensors.index.json")),
                       "{\n    \"metadata\": {\n        \"total_size\": "));
}

TEST(ShardedWriter, ShardsGreedilyAndGivesBigTensorsTheirOwnShard) {
  testing::TempDir tmp;
  // Name order: a(40) b(100, over the limit) c(30) d(30) e(10); limit 64.
  std::vector<TensorDecl> decls = {{"e", DType::kU8, {10}},
                                   {"c", DType::kU8, {30}},
                                   {"a", DType::kU8, {40}},
                                   {"d", DType::kU8, {30}},
                                   {"b", DType::kF32, {25}}};
  ShardedWriterOptions opts;
  opts.max_shard_bytes = 64;
  auto w = ShardedWriter::create(tmp.path(), decls, opts);
  ASSERT_TRUE(w.ok()) << w.error().message;
  std::vector<std::string> want = {
      "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
      "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"};
  EXPECT_EQ((*w)->shard_files(), want);
  for (const auto& d : decls) ASSERT_TRUE((*w)->write(d.name, fill(d)).ok());
  ASSERT_TRUE((*w)->finish().ok());
  std::vector<std::vector<std::string>> expect = {{"a"}, {"b"}, {"c", "d"}, {"e"}};
  for (size_t s = 0; s < 4; ++s) {
    auto f = SafetensorsFile::open(tmp.file(want[s]));
    ASSERT_TRUE(f.ok()) << f.error().message;
    std::vector<std::string> names;
    for (const auto& e : f->entries()) names.push_back(e.name);
    EXPECT_EQ(names, expect[s]) << want[s];
  }
  auto idx = read_json_file(tmp.file("model.safetensors.index.json"));
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ((*idx)["weight_map"]["d"], want[2]);
  EXPECT_EQ((*idx)["metadata"]["total_size"], 210);
}

TEST(ShardedWriter, FirstTensorOverLimitGetsNoEmptyShardBeforeIt) {
  testing::TempDir tmp;
  ShardedWriterOptions opts;
  opts.max_shard_bytes = 8;
  auto w = ShardedWriter::create(tmp.path(), {{"a", DType::kU8, {100}}}, opts);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->shard_files(), std::vector<std::string>{"model.safetensors"});
}

TEST(ShardedWriter, RejectsBadWritesAndLeavesNoModelFilesOnFailure) {
  testing::TempDir tmp;
  std::vector<TensorDecl> decls = {{"a", DType::kF32, {2}}, {"b", DType::kF32, {3}}};
  {
    auto w = ShardedWriter::create(tmp.path(), decls);
    ASSERT_TRUE(w.ok());
    std::vector<float> two(2), three(3);
    EXPECT_TRUE(contains((*w)->write("a", as_bytes(three)).error().message,
                         "got 12 bytes, declared F32 [2] needs 8"));
    EXPECT_TRUE(contains((*w)->write("zz", as_bytes(two)).error().message, "not declared"));
    ASSERT_TRUE((*w)->write("a", as_bytes(two)).ok());
    EXPECT_TRUE(contains((*w)->write("a", as_bytes(two)).error().message, "written twice"));
    Status st = (*w)->finish();
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(contains(st.error().message, "tensor 'b' was declared but never written"));
  }
  EXPECT_TRUE(dir_listing(tmp.path()).empty());  // partial shards removed on destruction
}

TEST(ShardedWriter, RejectsBadDeclarationsAndOccupiedDirectories) {
  testing::TempDir tmp;
  auto dup = ShardedWriter::create(tmp.path(), {{"a", DType::kF32, {1}}, {"a", DType::kU8, {1}}});
  EXPECT_TRUE(contains(dup.error().message, "declared twice"));
  auto neg = ShardedWriter::create(tmp.path(), {{"a", DType::kF32, {-1}}});
  EXPECT_TRUE(contains(neg.error().message, "invalid shape"));
  auto meta = ShardedWriter::create(tmp.path(), {{"__metadata__", DType::kF32, {1}}});
  EXPECT_FALSE(meta.ok());
  auto badname = ShardedWriter::create(tmp.path(), {{"\xff", DType::kF32, {1}}});
  EXPECT_TRUE(contains(badname.error().message, "cannot encode header"));
  testing::write_file(tmp.file("model-00001-of-00002.safetensors"), "x");
  auto busy = ShardedWriter::create(tmp.path(), {{"a", DType::kF32, {1}}});
  ASSERT_FALSE(busy.ok());
  EXPECT_TRUE(contains(busy.error().message, "already contains 'model-00001-of-00002"));
}

// read -> write -> read of our own files is byte-identical, shards and index alike.
TEST(ShardedWriter, RoundTripIsByteIdentical) {
  testing::TempDir a, b;
  auto decls = sample_decls();
  ShardedWriterOptions opts;
  opts.max_shard_bytes = 40;
  opts.metadata = {{"format", "mlx"}, {"note", "round trip"}};
  {
    auto w = ShardedWriter::create(a.path(), decls, opts);
    ASSERT_TRUE(w.ok());
    for (const auto& d : decls) ASSERT_TRUE((*w)->write(d.name, fill(d)).ok());
    ASSERT_TRUE((*w)->finish().ok());
  }
  std::vector<std::string> shards;
  for (const auto& n : dir_listing(a.path()))
    if (n.size() > 12 && n.substr(n.size() - 12) == ".safetensors") shards.push_back(n);
  ASSERT_GT(shards.size(), 1u);
  std::vector<SafetensorsFile> files;
  std::vector<TensorDecl> redecl;
  for (const auto& s : shards) {
    auto f = SafetensorsFile::open(a.file(s));
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->metadata(), opts.metadata);
    for (const auto& e : f->entries()) redecl.push_back({e.name, e.dtype, e.shape});
    files.push_back(std::move(f.value()));
  }
  ShardedWriterOptions opts2 = opts;
  opts2.metadata = files[0].metadata();
  auto w = ShardedWriter::create(b.path(), redecl, opts2);
  ASSERT_TRUE(w.ok());
  for (auto it = files.rbegin(); it != files.rend(); ++it)
    for (const auto& e : it->entries()) ASSERT_TRUE((*w)->write(e.name, it->data(e)).ok());
  ASSERT_TRUE((*w)->finish().ok());
  EXPECT_EQ(dir_listing(a.path()), dir_listing(b.path()));
  for (const auto& n : dir_listing(a.path()))
    EXPECT_EQ(testing::read_file(a.file(n)), testing::read_file(b.file(n))) << n;
}

}  // namespace
}  // namespace tq
