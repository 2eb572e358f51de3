#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "../testing/assets.h"
#include "../testing/gguf_builder.h"

namespace tq {
namespace {

using testing::GgufBuilder;

Result<GgufFile> parse(const std::vector<uint8_t>& b) { return GgufFile::parse(b, "t.gguf"); }

// Expects a parse error whose message names the file and contains `what`.
void expect_error(const std::vector<uint8_t>& b, const std::string& what) {
  auto r = parse(b);
  ASSERT_FALSE(r.ok()) << "expected error containing: " << what;
  EXPECT_NE(r.error().message.find("t.gguf: "), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().message;
}

GgufBuilder small_model() {
  GgufBuilder g;
  g.kv_str("general.architecture", "llama");
  g.kv_u32("llama.block_count", 2);
  g.kv_f32("llama.rope.freq_base", 100000.0f);
  g.kv_bool("tokenizer.ggml.add_bos_token", false);
  g.kv_str_array("tokenizer.ggml.tokens", {"a", "b", "\xc4\xa0"});
  g.kv_i32_array("tokenizer.ggml.token_type", {1, 3, 1});
  g.tensor_f32("w", {3, 2}, {1, 2, 3, 4, 5, 6});  // ne=[3,2]: 2 rows of 3
  g.tensor_f32("n", {5}, {1, 1, 1, 1, 1});
  return g;
}

TEST(Gguf, ParsesMetadataAndTensors) {
  auto b = small_model().build();
  auto r = parse(b);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const GgufFile& f = *r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.metadata().size(), 6u);
  EXPECT_EQ(*f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(*f.get_int("llama.block_count").value(), 2);
  EXPECT_FLOAT_EQ(*f.get_float("llama.rope.freq_base").value(), 100000.0);
  EXPECT_FALSE(*f.get_bool("tokenizer.ggml.add_bos_token").value());
  EXPECT_FALSE(f.get_int("missing").value().has_value());
  auto toks = f.get_string_array("tokenizer.ggml.tokens").value();
  ASSERT_EQ(toks.size(), 3u);
  EXPECT_EQ(toks[2], "\xc4\xa0");
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").value(), (std::vector<int64_t>{1, 3, 1}));
  // Wrong types are errors naming file and key.
  auto bad = f.get_int("general.architecture");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "t.gguf: metadata 'general.architecture' has type string "
            "(expected an integer)");

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo* w = f.find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape(), (Shape{2, 3}));  // ggml ne=[3,2] is row-major [2,3]
  EXPECT_EQ(w->nbytes, 24u);
  EXPECT_EQ(w->type_name, "F32");
  EXPECT_EQ(f.data_offset() % 32, 0u);
  auto t = f.load_f32(*w);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(f.find_tensor("n")->offset, 32u);  // 24 bytes of w, padded to 32
}

TEST(Gguf, ReadsEveryValueTypeAndNestedArrays) {
  GgufBuilder g;
  g.kv("u8", testing::kGU8).u8(200);
  g.kv("i8", testing::kGI8).u8(0xFF);
  auto& u16 = g.kv("u16", testing::kGU16);
  u16.u8(0x34), u16.u8(0x12);
  auto& i16 = g.kv("i16", testing::kGI16);
  i16.u8(0xFE), i16.u8(0xFF);
  g.kv_i32("i32", -7);
  g.kv_u64("u64", 1ull << 40);
  g.kv("i64", testing::kGI64).u64(static_cast<uint64_t>(-5));
  double d = 0.25;
  g.kv("f64", testing::kGF64).raw(&d, 8);
  auto& nested = g.kv("nested", testing::kGArray);  // [[1,2],[3]] of u16
  nested.u32(testing::kGArray), nested.u64(2);
  nested.u32(testing::kGU16), nested.u64(2), nested.u8(1), nested.u8(0), nested.u8(2), nested.u8(0);
  nested.u32(testing::kGU16), nested.u64(1), nested.u8(3), nested.u8(0);
  g.kv_f32_array("fa", {0.5f, -1.0f});
  auto b = g.build();
  auto r = parse(b);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r->get_int("u8").value(), 200);
  EXPECT_EQ(*r->get_int("i8").value(), -1);
  EXPECT_EQ(*r->get_int("u16").value(), 0x1234);
  EXPECT_EQ(*r->get_int("i16").value(), -2);
  EXPECT_EQ(*r->get_int("i32").value(), -7);
  EXPECT_EQ(*r->get_int("u64").value(), 1ll << 40);
  EXPECT_EQ(*r->get_int("i64").value(), -5);
  EXPECT_DOUBLE_EQ(*r->get_float("f64").value(), 0.25);
  const GgufValue* n = r->find("nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->arrays.size(), 2u);
  EXPECT_EQ(n->arrays[0].int_at(1), 2);
  EXPECT_EQ(n->arrays[1].int_at(0), 3);
  EXPECT_EQ(r->get_float_array("fa").value(), (std::vector<double>{0.5, -1.0}));
}

TEST(Gguf, RejectsBadMagic) {
  auto g = small_model();
  g.magic = 0x12345678;
  expect_error(g.build(), "not a GGUF file (bad magic)");
}

TEST(Gguf, RejectsVersion1AndUnknownVersions) {
  auto g = small_model();
  g.version = 1;
  expect_error(g.build(), "unsupported GGUF version 1");
  g.version = 7;
  expect_error(g.build(), "unsupported GGUF version 7");
  g.version = 0x03000000;
  expect_error(g.build(), "big-endian");
}

TEST(Gguf, RejectsCountsPastEof) {
  auto g = small_model();
  g.tensor_count_override = 1ll << 40;
  expect_error(g.build(), "tensors, more than the file can hold");
  g.tensor_count_override = -1;
  g.kv_count_override = 1ll << 50;
  expect_error(g.build(), "metadata entries, more than the file can hold");
  GgufBuilder h;
  auto& a = h.kv("arr", testing::kGArray);
  a.u32(testing::kGU32), a.u64(1ull << 62);
  expect_error(h.build(), "claims 4611686018427387904 array elements");
}

TEST(Gguf, RejectsStringLengthPastEof) {
  GgufBuilder g;
  auto& m = g.kv("s", testing::kGString);
  m.u64(1000);  // no bytes follow
  expect_error(g.build(), "string value of 's' at offset");
  // A key whose length runs past the end.
  testing::GgufBytes raw;
  raw.u32(0x46554747), raw.u32(3), raw.u64(0), raw.u64(1), raw.u64(~0ull);
  raw.b.resize(raw.b.size() + 16, 0);
  expect_error(raw.b, "metadata key 0 at offset 24 has length");
}

TEST(Gguf, RejectsTruncatedFile) {
  auto b = small_model().build();
  for (size_t n : {size_t{0}, size_t{3}, size_t{10}, size_t{30}, b.size() / 2, b.size() - 1}) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<long>(n));
    auto r = parse(cut);
    EXPECT_FALSE(r.ok()) << "truncated to " << n;
  }
}

TEST(Gguf, RejectsBadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    auto g = small_model();
    g.kv_u32("general.alignment", a);
    expect_error(g.build(), "is not a non-zero power of two");
  }
  auto g = small_model();
  g.kv_str("general.alignment", "32");
  expect_error(g.build(), "general.alignment has type string");
  // A valid non-default alignment is honoured.
  auto h = small_model();
  h.kv_u32("general.alignment", 64);
  h.alignment = 64;
  auto b = h.build();
  auto r = parse(b);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->alignment(), 64u);
  EXPECT_EQ(r->data_offset() % 64, 0u);
  EXPECT_EQ(r->find_tensor("n")->offset, 64u);
}

TEST(Gguf, RejectsTensorDataPastEof) {
  auto g = small_model();
  g.tensor("far", {8}, 0, {}, 4096);
  expect_error(g.build(), "tensor 'far' data");
  auto b = small_model().build();
  b.resize(b.size() - 4);  // cut the last tensor's data short
  expect_error(b, "tensor 'n' data");
}

TEST(Gguf, RejectsMisalignedAndOverlappingTensors) {
  auto g = small_model();
  g.tensor("odd", {1}, 0, {}, 4);
  expect_error(g.build(), "tensor 'odd' offset 4 is not a multiple of the alignment 32");
  auto h = small_model();
  h.tensor("dup", {2}, 0, {}, 0);  // overlaps "w" at 0
  expect_error(h.build(), "overlaps");
}

TEST(Gguf, RejectsUnknownGgmlTypeAndBadShapes) {
  auto g = small_model();
  g.tensor("weird", {32}, 99, std::vector<uint8_t>(64));
  expect_error(g.build(), "tensor 'weird' has unknown ggml type id 99");
  auto h = small_model();
  h.tensor("q", {33}, 8, std::vector<uint8_t>(68));  // Q8_0 rows must be multiples of 32
  expect_error(h.build(), "tensor 'q' row length 33 is not a multiple of the Q8_0 block size 32");
  auto k = small_model();
  k.tensor("big", {2, 2, 2, 2, 2}, 0, std::vector<uint8_t>(128));
  expect_error(k.build(), "tensor 'big' has 5 dimensions (at most 4)");
  auto m = small_model();
  m.tensor("huge", {1ull << 40, 1ull << 40}, 0, {});
  expect_error(m.build(), "tensor 'huge' has too many elements");
  auto d = small_model();
  d.tensor_f32("w", {1}, {0});
  expect_error(d.build(), "tensor 'w' is listed twice");
}

TEST(Gguf, RejectsDuplicateKeysAndBadTypes) {
  auto g = small_model();
  g.kv_u32("llama.block_count", 3);
  expect_error(g.build(), "metadata key 'llama.block_count' appears twice");
  GgufBuilder h;
  h.kv("x", 13).u32(0);
  expect_error(h.build(), "metadata 'x' has invalid type 13");
}

TEST(Gguf, RejectsDeeplyNestedArrays) {
  GgufBuilder g;
  auto& m = g.kv("deep", testing::kGArray);
  for (int i = 0; i < 20; ++i) m.u32(testing::kGArray), m.u64(1);
  m.u32(testing::kGU8), m.u64(0);
  expect_error(g.build(), "nests arrays deeper than");
}

TEST(Gguf, KnownButUndecodableTypeFailsOnLoad) {
  auto g = small_model();
  g.tensor("iq", {256}, 17, std::vector<uint8_t>(74));  // IQ2_XS
  auto b = g.build();
  auto r = parse(b);
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto t = r->load_f32(*r->find_tensor("iq"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().message, "t.gguf: tensor 'iq' has type IQ2_XS, which tq cannot decode");
}

TEST(Gguf, OpenReadsFromDiskAndNamesTheFile) {
  auto dir = std::filesystem::temp_directory_path() / "tq_gguf_test";
  std::filesystem::create_directories(dir);
  auto path = (dir / "m.gguf").string();
  small_model().write(path);
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  GgufFile moved = std::move(r).value();  // views stay valid after a move
  EXPECT_EQ(*moved.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(moved.load_f32(*moved.find_tensor("w"))->data[5], 6.0f);
  auto missing = GgufFile::open((dir / "nope.gguf").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("nope.gguf: cannot open"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// The real asset, when present: the container parses and every tensor lies in the file.
TEST(Gguf, ParsesSmolLM2Asset) {
  std::string path = testing::asset_path("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  TQ_REQUIRE_ASSET(path);
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->version(), 3u);
  EXPECT_EQ(r->tensors().size(), 272u);
  EXPECT_EQ(r->metadata().size(), 33u);
  EXPECT_EQ(r->get_string_array("tokenizer.ggml.tokens")->size(), 49152u);
  const GgufTensorInfo* e = r->find_tensor("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape(), (Shape{49152, 576}));
  EXPECT_EQ(e->type_name, "Q8_0");
  EXPECT_EQ(r->find_tensor("blk.0.attn_k.weight")->shape(), (Shape{192, 576}));
}

}  // namespace
}  // namespace tq
