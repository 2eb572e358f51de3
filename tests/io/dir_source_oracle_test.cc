// Driven by tests/oracle/test_mlx_checkpoint.py: with TQ_ORACLE_DIR set, reads that checkpoint
// directory through DirTensorSource and writes every tensor as F32 with ShardedWriter into
// TQ_ORACLE_OUT (default $TQ_ORACLE_DIR/tq_f32), one file, so Python can compare with mlx.
// With TQ_ORACLE_COPY_OUT set, it also copies every stored tensor verbatim into that directory
// in shards of TQ_ORACLE_SHARD_BYTES (default 64 KiB), so mlx-lm can load what we wrote.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "io/checkpoint_dir.h"

namespace tq {
namespace {

TEST(DirSourceOracle, ExportsEveryTensorAsF32) {
  const char* dir = std::getenv("TQ_ORACLE_DIR");
  if (dir == nullptr || *dir == '\0') GTEST_SKIP() << "TQ_ORACLE_DIR not set";
  const char* out_env = std::getenv("TQ_ORACLE_OUT");
  std::string out = out_env && *out_env ? out_env : std::string(dir) + "/tq_f32";

  auto src = DirTensorSource::open(dir);
  ASSERT_TRUE(src.ok()) << src.error().message;
  std::vector<TensorDecl> decls;
  for (const auto& t : (*src)->tensors()) decls.push_back({t.name, DType::kF32, t.shape});
  ShardedWriterOptions opts;
  opts.max_shard_bytes = ~uint64_t{0};
  opts.metadata = {{"format", "mlx"}, {"producer", "tq DirSourceOracle"}};
  auto w = ShardedWriter::create(out, decls, opts);
  ASSERT_TRUE(w.ok()) << w.error().message;
  for (const auto& t : (*src)->tensors()) {
    auto f = (*src)->load_f32(t.name);
    ASSERT_TRUE(f.ok()) << f.error().message;
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(f->data.data()),
                                   f->data.size() * sizeof(float));
    Status st = (*w)->write(t.name, bytes);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  Status st = (*w)->finish();
  ASSERT_TRUE(st.ok()) << st.error().message;
}

TEST(DirSourceOracle, CopiesStoredTensorsVerbatim) {
  const char* dir = std::getenv("TQ_ORACLE_DIR");
  const char* out = std::getenv("TQ_ORACLE_COPY_OUT");
  if (!dir || !*dir || !out || !*out) GTEST_SKIP() << "TQ_ORACLE_DIR/TQ_ORACLE_COPY_OUT not set";
  const char* shard_env = std::getenv("TQ_ORACLE_SHARD_BYTES");
  auto src = DirTensorSource::open(dir);
  ASSERT_TRUE(src.ok()) << src.error().message;
  std::vector<TensorDecl> decls;
  for (const auto& f : (*src)->files())
    for (const auto& e : f.entries()) decls.push_back({e.name, e.dtype, e.shape});
  ShardedWriterOptions opts;
  opts.max_shard_bytes = shard_env && *shard_env ? std::stoull(shard_env) : 64 << 10;
  auto w = ShardedWriter::create(out, decls, opts);
  ASSERT_TRUE(w.ok()) << w.error().message;
  for (const auto& f : (*src)->files())
    for (const auto& e : f.entries()) {
      Status st = (*w)->write(e.name, f.data(e));
      ASSERT_TRUE(st.ok()) << st.error().message;
    }
  Status st = (*w)->finish();
  ASSERT_TRUE(st.ok()) << st.error().message;
}

}  // namespace
}  // namespace tq
