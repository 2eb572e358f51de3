// The fold plan (seed "The recipe", FORMATS.md §6.2–6.4): pure, from the family tensor table
// and the options, which operations each tensor gets, in this order: untie, γ-fold, R1, R2
// (untie and γ-fold only with R1: they exist to let R1 rotate the residual stream).
// No tensor data is read; fold_apply.h executes a plan one layer at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "model/model_config.h"
#include "model/tensor_table.h"
#include "rotate/rotation.h"

namespace tq {

enum class FoldDType : uint8_t { kF32, kF64 };

struct RotationOptions {
  RotationKind r1 = RotationKind::kHadamard;
  RotationKind r2 = RotationKind::kHadamard;
  uint64_t seed = 0;
  FoldDType fold_dtype = FoldDType::kF32;
  // --r2 was given on the command line: a family without R2 (qwen3_5) then refuses instead of
  // noting that R2 is off.
  bool r2_given = false;
};

// The --r1/--r2/--seed flags of tq convert and tq sensitivity; errors name the flag. An empty r2
// is the default (hadamard where the family has R2) and leaves r2_given false.
Result<RotationOptions> parse_rotation_options(std::string_view r1, std::string_view r2,
                                               uint64_t seed);

// What a sensitivity table records of the rotation it was measured under, and what
// `tq convert --rotate-weights --target-bpw` compares: {"r1", "r2", "seed"}.
nlohmann::json rotation_identity(const RotationOptions& ro);

enum class FoldOp : uint8_t {
  kCloneEmbed,  // lm_head.weight <- a copy of model.embed_tokens.weight (untie)
  kGammaCols,   // W <- W·diag(γ), γ = the gain of `norm`
  kSetOnes,     // a folded RMSNorm gain <- ones (module and eps kept)
  kR1Right,     // W <- W·R1 per residual-width block of the input (the MTP fc has two)
  kR1LeftT,     // W <- R1ᵀ·W, b <- R1ᵀ·b (output features are residual)
  kR2LeftT,     // per kv head m: W_m <- R2ᵀ·W_m, b_m <- R2ᵀ·b_m (v_proj rows, v bias)
  kR2Right,     // per query head n: W_n <- W_n·R2 (o_proj columns)
};
std::string_view fold_op_name(FoldOp op);

struct FoldStep {
  FoldOp op;
  const TensorKind* norm = nullptr;     // kGammaCols: the norm's table row
  const TensorKind* norm_hi = nullptr;  // kGammaCols: the second input half's norm (MTP fc)
};

struct TensorFold {
  const TensorKind* kind = nullptr;
  std::vector<FoldStep> steps;
};

// How one rotation is made; R2 uses stream 1 + layer, so every layer has its own R2.
struct RotationSpec {
  RotationKind kind = RotationKind::kNone;
  int64_t n = 0;
  int64_t k = 1;  // hadamard: n = k·2^m
  int64_t m = 0;
  std::string construction;  // hadamard: of H_K
};

struct FoldPlan {
  ModelConfig config;  // the source geometry
  RotationOptions options;
  bool untie = false;   // tied source: clone embed into lm_head, write tie_word_embeddings false
  RotationSpec r1, r2;  // kind kNone when off (by option or because the family forbids it)
  std::vector<TensorFold> globals;  // embed, final norm, lm_head (model order)
  std::vector<TensorFold> layer;    // one decoder layer's tensors (the same for every layer)
  std::vector<std::string> notes;   // folds this family/config disables, and why

  Result<Rotation> make_r1() const;
  Result<Rotation> make_r2(int64_t layer) const;
};

// Errors: a hidden size (R1) or head_dim (R2) with no Hadamard construction under "hadamard",
// naming the size and suggesting random.
Result<FoldPlan> plan_folds(const ModelConfig& cfg, const RotationOptions& opts);

// --dry-run lines: the rotations, then one line per tensor pattern with its steps.
std::vector<std::string> describe_plan(const FoldPlan& plan);

// config.json edits: tie_word_embeddings false when the plan unties.
Status fold_config(const FoldPlan& plan, nlohmann::json& config);

}  // namespace tq
