// The conversion plan (DESIGN.md "How data flows through tq convert", step 2): for every tensor
// of the output model, keep float or quantize with a QuantSpec; pure, no tensor data. Its size
// accounting is mlx-lm's (size_stats over the logical tensors it will write).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "io/safetensors.h"
#include "model/model_config.h"
#include "model/model_source.h"
#include "model/tensor_table.h"
#include "recipe/recipe.h"
#include "tensor/dtype.h"

namespace tq {

struct PlanEntry {
  std::string name;    // HF tensor name: "model.layers.3.mlp.down_proj.weight"
  std::string module;  // module path for quantized matrices: "model.layers.3.mlp.down_proj"
  Shape shape;
  const TensorKind* kind = nullptr;
  int64_t layer = -1;             // -1: outside the decoder layers
  std::optional<QuantSpec> spec;  // set: quantized; else written as float in the plan dtype
  std::string decided_by;         // "default", "recipe.json rule 2", "not quantizable", ...
  int min_bits = 0;               // from "min_bits" recipe rules (allocation honours it)
  bool pinned = false;            // a rule or --keep-float decided it (allocation keeps it)
};

struct PlanOptions {
  // Explicit flags (--mode/--bits/--group-size); unset ones come from the recipe, then from the
  // mode's defaults (affine 4-bit g64).
  std::optional<QuantMode> mode;
  std::optional<int> bits, group_size;
  std::vector<std::string> keep_float;  // --keep-float patterns (same syntax as recipe matches)
  std::optional<Recipe> recipe;
  DType dtype = DType::kBF16;  // float tensors, and affine scales/biases
};

struct QuantPlan {
  ModelConfig config;  // geometry of the output model
  QuantSpec global;    // the `quantization` block's global spec
  DType dtype = DType::kBF16;
  std::vector<PlanEntry> entries;  // model order: globals before the layers, then the rest

  // The tensors as stored (P.weight U32 + P.scales [+ P.biases] for quantized modules).
  std::vector<TensorDecl> stored_tensors() const;
  // The dtype a float entry is written in: `dtype`, or f32 for a keep_f32 row (A_log).
  DType float_dtype(const PlanEntry& e) const {
    return e.kind != nullptr && e.kind->keep_f32 ? DType::kF32 : dtype;
  }
  // Logical tensors as a reader of the output lists them (TensorSource::tensors()).
  std::vector<TensorInfo> logical_tensors() const;
  SizeStats size() const;  // exact bytes / params / bpw, mlx-lm's definition
  // Quantized modules whose spec differs from the global one: they need a per-module dict.
  std::map<std::string, QuantSpec> overrides() const;
  // The `quantization` object of config.json (global + one full dict per override).
  nlohmann::json quantization_json() const;
  bool any_quantized() const;  // false for an all-float plan (--no-quantize)
  // Every quantizable module: its spec as {mode, bits, group_size}, or "float".
  nlohmann::json modules_json() const;
};

// Builds and validates the plan. Errors (one line each, before any work): an invalid global
// spec naming the flags, an invalid rule spec naming the rule, a required rule or --keep-float
// pattern matching no quantizable module, a module whose input width is not a multiple of its
// group (named, with how to choose).
Result<QuantPlan> build_plan(const ModelConfig& cfg, const PlanOptions& opts);

// Stored bytes of one quantized [rows, cols] matrix: weight + scales (+ biases).
uint64_t quantized_bytes(const QuantSpec& s, int64_t rows, int64_t cols, DType dtype);

}  // namespace tq
