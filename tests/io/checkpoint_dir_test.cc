#include "io/checkpoint_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "../testing/test_files.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using testing::contains;

struct Blob {
  TensorDecl decl;
  std::vector<uint8_t> bytes;
};

template <typename T>
Blob blob(std::string name, DType dt, Shape shape, const std::vector<T>& v) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(v.data());
  return {{std::move(name), dt, std::move(shape)},
          std::vector<uint8_t>(p, p + v.size() * sizeof(T))};
}

// Writes `blobs` with our writer into dir (creating it) plus config.json.
void write_ckpt(const std::string& dir, const std::vector<Blob>& blobs, const std::string& config,
                uint64_t max_shard = 5ull << 30) {
  std::vector<TensorDecl> decls;
  for (const auto& b : blobs) decls.push_back(b.decl);
  ShardedWriterOptions opts;
  opts.max_shard_bytes = max_shard;
  auto w = ShardedWriter::create(dir, decls, opts);
  ASSERT_TRUE(w.ok()) << w.error().message;
  for (const auto& b : blobs) ASSERT_TRUE((*w)->write(b.decl.name, b.bytes).ok());
  ASSERT_TRUE((*w)->finish().ok());
  testing::write_file(dir + "/config.json", config);
}

std::string open_error(const std::string& dir) {
  auto s = DirTensorSource::open(dir);
  return s.ok() ? "" : s.error().message;
}

TEST(CheckpointDir, ReadsFloatTensorsAndTokenizerFiles) {
  testing::TempDir tmp;
  std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 1e-3f};
  std::vector<uint16_t> bf16, f16;
  for (float x : f32) {
    bf16.push_back(f32_to_bf16(x));
    f16.push_back(f32_to_f16(x));
  }
  write_ckpt(
      tmp.path(),
      {blob("a", DType::kF32, {2, 2}, f32), blob("b", DType::kBF16, {4}, bf16),
       blob("c", DType::kF16, {1, 4}, f16), blob("ids", DType::kI64, {1}, std::vector<int64_t>{7})},
      R"({"model_type":"llama"})", /*max_shard=*/16);
  testing::write_file(tmp.file("generation_config.json"), "{}");
  testing::write_file(tmp.file("tokenizer.json"), "{}");
  auto src = DirTensorSource::open(tmp.path());
  ASSERT_TRUE(src.ok()) << src.error().message;
  const CheckpointDir& c = (*src)->checkpoint();
  EXPECT_TRUE(c.has_index);
  EXPECT_EQ(c.shard_files.size(), 3u);  // [a] [b c] [ids] at 16 bytes per shard
  EXPECT_EQ(c.tokenizer_files,
            (std::vector<std::string>{"tokenizer.json", "generation_config.json"}));
  EXPECT_FALSE(c.quantization.has_value());
  EXPECT_TRUE(c.warnings.empty());
  ASSERT_EQ((*src)->tensors().size(), 4u);
  const TensorInfo* b = (*src)->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->storage, "BF16");
  EXPECT_EQ(b->stored_bytes, 8u);
  EXPECT_FALSE(b->mlx_quant.has_value());
  for (const char* n : {"a", "b", "c"}) {
    auto t = (*src)->load_f32(n);
    ASSERT_TRUE(t.ok()) << t.error().message;
    ASSERT_EQ(t->data.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      float want = n[0] == 'a' ? f32[i] : n[0] == 'b' ? bf16_to_f32(bf16[i]) : f16_to_f32(f16[i]);
      EXPECT_EQ(t->data[i], want) << n << i;
    }
  }
  EXPECT_EQ((*src)->load_f32("a")->shape, (Shape{2, 2}));
  EXPECT_TRUE(contains((*src)->load_f32("ids").error().message, "is I64 and cannot be read"));
  EXPECT_TRUE(contains((*src)->load_f32("zz").error().message, "no tensor 'zz'"));
}

TEST(CheckpointDir, GlobsWithoutIndex) {
  testing::TempDir tmp;
  std::vector<float> v = {1, 2};
  write_ckpt(tmp.path(), {blob("a", DType::kF32, {2}, v), blob("b", DType::kF32, {2}, v)}, "{}", 8);
  fs::remove(tmp.file("model.safetensors.index.json"));
  auto c = open_checkpoint_dir(tmp.path());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_FALSE(c->has_index);
  EXPECT_EQ(c->shard_files, (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                      "model-00002-of-00002.safetensors"}));
  // Without model*.safetensors, any *.safetensors is taken.
  fs::rename(tmp.file("model-00001-of-00002.safetensors"), tmp.file("w1.safetensors"));
  fs::rename(tmp.file("model-00002-of-00002.safetensors"), tmp.file("w2.safetensors"));
  auto src = DirTensorSource::open(tmp.path());
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ((*src)->tensors().size(), 2u);
  // The same tensor in two files is an error.
  fs::copy_file(tmp.file("w1.safetensors"), tmp.file("w3.safetensors"));
  EXPECT_TRUE(contains(open_error(tmp.path()), "tensor 'a' also appears in"));
}

TEST(CheckpointDir, RejectsBrokenDirectories) {
  testing::TempDir tmp;
  EXPECT_TRUE(contains(open_error(tmp.file("nope")), "not a directory"));
  EXPECT_TRUE(contains(open_error(tmp.path()), "missing config.json"));
  testing::write_file(tmp.file("config.json"), "{");
  EXPECT_TRUE(contains(open_error(tmp.path()), "config.json: invalid JSON"));
  testing::write_file(tmp.file("config.json"), "{}");
  EXPECT_TRUE(contains(open_error(tmp.path()), "no .safetensors files"));
}

TEST(CheckpointDir, ValidatesIndexAgainstShards) {
  std::vector<float> v = {1, 2};
  auto make = [&](testing::TempDir& tmp) {
    write_ckpt(tmp.path(), {blob("a", DType::kF32, {2}, v), blob("b", DType::kF32, {2}, v)}, "{}",
               8);
  };
  {
    testing::TempDir tmp;
    make(tmp);
    fs::remove(tmp.file("model-00002-of-00002.safetensors"));
    EXPECT_TRUE(contains(open_error(tmp.path()),
                         "shard 'model-00002-of-00002.safetensors' referenced by the index does "
                         "not exist"));
  }
  {
    testing::TempDir tmp;
    make(tmp);
    testing::write_file(
        tmp.file("model.safetensors.index.json"),
        R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors"}})");
    std::string e = open_error(tmp.path());
    EXPECT_TRUE(contains(e, "tensor 'b' listed in model.safetensors.index.json is missing")) << e;
  }
  {
    testing::TempDir tmp;
    make(tmp);
    testing::write_file(tmp.file("model.safetensors.index.json"),
                        R"({"weight_map":{"a":"model-00001-of-00002.safetensors",)"
                        R"("b":"model-00001-of-00002.safetensors",)"
                        R"("c":"model-00002-of-00002.safetensors"}})");
    std::string e = open_error(tmp.path());
    EXPECT_TRUE(contains(e, "tensor 'b' is not in model.safetensors.index.json") ||
                contains(e, "tensor 'b' is mapped to"))
        << e;
  }
  {
    testing::TempDir tmp;
    make(tmp);
    testing::write_file(tmp.file("model.safetensors.index.json"),
                        R"({"weight_map":{"a":"../model-00001-of-00002.safetensors"}})");
    EXPECT_TRUE(contains(open_error(tmp.path()), "is not a file name in the directory"));
    testing::write_file(tmp.file("model.safetensors.index.json"), R"({"weight_map":{"a":1}})");
    EXPECT_TRUE(contains(open_error(tmp.path()), "must be a file name string"));
    testing::write_file(tmp.file("model.safetensors.index.json"), R"({"metadata":{}})");
    EXPECT_TRUE(contains(open_error(tmp.path()), "missing object 'weight_map'"));
  }
  {
    testing::TempDir tmp;
    make(tmp);
    fs::copy_file(tmp.file("model-00001-of-00002.safetensors"),
                  tmp.file("model-extra.safetensors"));
    auto src = DirTensorSource::open(tmp.path());
    ASSERT_TRUE(src.ok()) << src.error().message;
    ASSERT_EQ((*src)->checkpoint().warnings.size(), 1u);
    EXPECT_TRUE(contains((*src)->checkpoint().warnings[0], "'model-extra.safetensors' is not in"));
  }
}

// Packs 4-bit codes, 8 per little-endian uint32 word, first code in the low bits.
std::vector<uint32_t> pack4(const std::vector<uint8_t>& codes) {
  std::vector<uint32_t> w(codes.size() / 8, 0);
  for (size_t i = 0; i < codes.size(); ++i) w[i / 8] |= uint32_t{codes[i]} << (4 * (i % 8));
  return w;
}

constexpr float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

// Module "m" is affine 4-bit g32 (global), module "x" an mxfp4 override.
std::vector<Blob> quantized_blobs(std::vector<uint8_t>* codes_m, std::vector<uint8_t>* codes_x) {
  const int rows = 2, cols = 64;
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < cols; ++k) codes_m->push_back(static_cast<uint8_t>((r * 7 + k) % 16));
  for (int k = 0; k < 32; ++k) codes_x->push_back(static_cast<uint8_t>((k * 5) % 16));
  std::vector<float> scales = {0.5f, 1.0f, 1.5f, 2.0f};  // [2, 2]
  std::vector<float> biases = {-1.0f, -2.0f, -3.0f, -4.0f};
  return {blob("m.weight", DType::kU32, {2, 8}, pack4(*codes_m)),
          blob("m.scales", DType::kF32, {2, 2}, scales),
          blob("m.biases", DType::kF32, {2, 2}, biases),
          blob("m.bias", DType::kF32, {2}, std::vector<float>{0.25f, 0.5f}),
          blob("x.weight", DType::kU32, {1, 4}, pack4(*codes_x)),
          blob("x.scales", DType::kU8, {1, 1}, std::vector<uint8_t>{128}),  // 2^1
          blob("norm.weight", DType::kBF16, {2}, std::vector<uint16_t>{0x3f80, 0x4000})};
}

const char* kQuantConfig = R"({"model_type":"llama","quantization":{"group_size":32,"bits":4,)"
                           R"("x":{"group_size":32,"bits":4,"mode":"mxfp4"}}})";

TEST(DirTensorSource, DequantizesMlxModules) {
  testing::TempDir tmp;
  std::vector<uint8_t> cm, cx;
  write_ckpt(tmp.path(), quantized_blobs(&cm, &cx), kQuantConfig);
  auto src = DirTensorSource::open(tmp.path());
  ASSERT_TRUE(src.ok()) << src.error().message;
  std::vector<std::string> names;
  for (const auto& t : (*src)->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"m.bias", "m.weight", "norm.weight", "x.weight"}));

  const TensorInfo* m = (*src)->find("m.weight");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->shape, (Shape{2, 64}));
  EXPECT_EQ(m->storage, "affine");
  EXPECT_EQ(m->stored_dtype, DType::kF32);
  EXPECT_EQ(m->stored_bytes, 64u + 16u + 16u);
  ASSERT_TRUE(m->mlx_quant.has_value());
  EXPECT_EQ(*m->mlx_quant, (QuantSpec{QuantMode::kAffine, 4, 32}));
  auto mt = (*src)->load_f32("m.weight");
  ASSERT_TRUE(mt.ok()) << mt.error().message;
  const float s[4] = {0.5f, 1.0f, 1.5f, 2.0f}, b[4] = {-1, -2, -3, -4};
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 64; ++k) {
      int g = r * 2 + k / 32;
      ASSERT_EQ(mt->data[r * 64 + k], s[g] * cm[r * 64 + k] + b[g]) << r << "," << k;
    }

  const TensorInfo* x = (*src)->find("x.weight");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->storage, "mxfp4");
  EXPECT_EQ(x->stored_dtype, DType::kU8);
  EXPECT_EQ(x->shape, (Shape{1, 32}));
  EXPECT_EQ(x->stored_bytes, 17u);
  auto xt = (*src)->load_f32("x.weight");
  ASSERT_TRUE(xt.ok()) << xt.error().message;
  for (int k = 0; k < 32; ++k) ASSERT_EQ(xt->data[k], 2.0f * kE2M1[cx[k]]) << k;

  size_t fi = 99;
  const SafetensorsEntry* raw = (*src)->stored("m.scales", &fi);
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(fi, 0u);
  EXPECT_EQ((*src)->find("m.scales"), nullptr);  // folded into m.weight
}

// load_f32 rounds affine s*q + b to the bf16 scales dtype (as mx.dequantize); load_f32_compute
// keeps it in f32, as mlx's quantized matmul does with f32 activations.
TEST(DirTensorSource, ComputeLoadKeepsAffineValuesInF32) {
  testing::TempDir tmp;
  std::vector<uint8_t> codes;
  for (int k = 0; k < 32; ++k) codes.push_back(static_cast<uint8_t>(k % 16));
  const float s = 1.0078125f, b = -0.5f;  // bf16 0x3F81 and 0xBF00: exact
  write_ckpt(tmp.path(),
             {blob("m.weight", DType::kU32, {1, 4}, pack4(codes)),
              blob("m.scales", DType::kBF16, {1, 1}, std::vector<uint16_t>{0x3F81}),
              blob("m.biases", DType::kBF16, {1, 1}, std::vector<uint16_t>{0xBF00})},
             R"({"model_type":"llama","quantization":{"group_size":32,"bits":4}})");
  auto src = DirTensorSource::open(tmp.path());
  ASSERT_TRUE(src.ok()) << src.error().message;
  auto stored = (*src)->load_f32("m.weight");
  auto compute = (*src)->load_f32_compute("m.weight");
  ASSERT_TRUE(stored.ok() && compute.ok());
  int rounded = 0;
  for (int k = 0; k < 32; ++k) {
    ASSERT_EQ(compute->data[k], s * codes[k] + b) << k;
    rounded += stored->data[k] != compute->data[k];
  }
  EXPECT_GT(rounded, 0);  // 15 * 1.0078125 = 15.1171875 needs more than bf16's 8 bits
}

// Rewrites one blob of the quantized fixture and returns the open error.
std::string quant_error(const std::function<void(std::vector<Blob>&)>& edit,
                        const std::string& config = kQuantConfig) {
  testing::TempDir tmp;
  std::vector<uint8_t> cm, cx;
  auto blobs = quantized_blobs(&cm, &cx);
  edit(blobs);
  write_ckpt(tmp.path(), blobs, config);
  return open_error(tmp.path());
}

Blob* find_blob(std::vector<Blob>& v, const std::string& name) {
  for (auto& b : v)
    if (b.decl.name == name) return &b;
  return nullptr;
}

TEST(DirTensorSource, RejectsInconsistentQuantizedModules) {
  EXPECT_EQ(quant_error([](auto&) {}), "");
  std::string e = quant_error([](auto& v) {
    Blob* sc = find_blob(v, "m.scales");
    sc->decl.shape = {2, 1};
    sc->bytes.resize(8);
  });
  EXPECT_TRUE(contains(e, "'m.weight' [2, 8] and 'm.scales' [2, 1] do not fit affine")) << e;
  EXPECT_TRUE(contains(e, "model.safetensors")) << e;
  e = quant_error([](auto& v) { v.erase(v.begin() + 2); });  // m.biases
  EXPECT_TRUE(contains(e, "'m.biases' is missing")) << e;
  e = quant_error([](auto& v) {
    v.push_back(blob("x.biases", DType::kU8, {1, 1}, std::vector<uint8_t>{0}));
  });
  EXPECT_TRUE(contains(e, "'x.biases' must not exist for mxfp4")) << e;
  e = quant_error([](auto& v) { find_blob(v, "m.weight")->decl.dtype = DType::kI32; });
  EXPECT_TRUE(contains(e, "quantized weight must be U32")) << e;
  e = quant_error([](auto& v) { find_blob(v, "x.scales")->decl.dtype = DType::kI8; });
  EXPECT_TRUE(contains(e, "'x.scales' is I8 but mxfp4 scales must be U8")) << e;
  e = quant_error([](auto& v) {
    Blob* bb = find_blob(v, "m.biases");
    bb->decl.dtype = DType::kI32;
  });
  EXPECT_TRUE(contains(e, "'m.biases' I32 [2, 2] must match")) << e;
  e = quant_error(
      [](auto& v) { v.push_back(blob("y.scales", DType::kF32, {1}, std::vector<float>{1})); });
  EXPECT_TRUE(contains(e, "'y.scales' has no matching 'y.weight'")) << e;
  e = quant_error([](auto&) {}, R"({"model_type":"llama"})");
  EXPECT_TRUE(contains(e, "is quantized but")) << e;
  EXPECT_TRUE(contains(e, "config.json has no quantization block")) << e;
  e = quant_error([](auto&) {}, R"({"quantization":{"group_size":32,"bits":4,"m":false}})");
  EXPECT_TRUE(contains(e, "module 'm' is marked unquantized (false)")) << e;
  // Global spec g64 does not fit m's shapes (scales [2,2] -> 128 columns vs 64 from weight).
  e = quant_error([](auto&) {},
                  R"({"quantization":{"group_size":64,"bits":4,"x":{"mode":"mxfp4"}}})");
  EXPECT_TRUE(contains(e, "do not fit affine 4-bit g64")) << e;
  e = quant_error([](auto&) {},
                  R"({"quantization":{"group_size":32,"bits":4,"x":{"bits":4,"group_size":32}}})");
  // Without "mode" a per-module dict means affine, whatever the global mode.
  EXPECT_TRUE(contains(e, "'x.scales' is U8 but affine 4-bit g32 scales must be F16, BF16 or F32"))
      << e;
}

}  // namespace
}  // namespace tq
