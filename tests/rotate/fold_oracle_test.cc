// Driven by tests/oracle/test_rotation_parity.py until `tq convert --rotate-weights
// --no-quantize` exists: with TQ_ROTATE_SRC and TQ_ROTATE_OUT set, folds the model at SRC and
// writes the folded float checkpoint to OUT. TQ_ROTATE_OPTS (JSON, optional):
// {"r1": "hadamard", "r2": "hadamard", "seed": 0, "fold_dtype": "f32", "dtype": "f32|bf16|f16"}.
#include <gtest/gtest.h>

#include <cstdlib>

#include "fold_testing.h"

namespace tq {
namespace {

TEST(RotationOracle, WritesFoldedModel) {
  const char* src = std::getenv("TQ_ROTATE_SRC");
  const char* out = std::getenv("TQ_ROTATE_OUT");
  if (!src || !*src || !out || !*out) GTEST_SKIP() << "TQ_ROTATE_SRC/TQ_ROTATE_OUT not set";
  const char* opts_env = std::getenv("TQ_ROTATE_OPTS");
  nlohmann::json o = nlohmann::json::parse(opts_env && *opts_env ? opts_env : "{}");
  RotationOptions opts;
  auto r1 = parse_rotation_kind(o.value("r1", "hadamard"));
  auto r2 = parse_rotation_kind(o.value("r2", "hadamard"));
  ASSERT_TRUE(r1.ok() && r2.ok());
  opts.r1 = *r1;
  opts.r2 = *r2;
  opts.seed = o.value("seed", uint64_t{0});
  opts.fold_dtype = o.value("fold_dtype", "f32") == "f64" ? FoldDType::kF64 : FoldDType::kF32;
  const std::string dt = o.value("dtype", "f32");
  DType dtype = dt == "bf16" ? DType::kBF16 : dt == "f16" ? DType::kF16 : DType::kF32;
  Status st = testing::write_folded_model(src, out, opts, dtype);
  ASSERT_TRUE(st.ok()) << st.error().message;
}

}  // namespace
}  // namespace tq
