// The sensitivity table (`tq sensitivity` writes it, allocation reads it): for every quantizable
// module and candidate spec, the mean KL(reference || model with only that module quantized)
// per scored calibration token, in nats. LOWER IS BETTER: `kl` is the damage at that spec, not
// a gain (the seed's first reading flipped this sign and allocated nothing).
//
// sensitivity.json (schema version 1; every key always written):
// {
//   "format": "turboquant.sensitivity", "version": 1,
//   "model": "<path as given>", "model_fingerprint": "<eval::model_fingerprint>",
//   "family": "llama", "tie_word_embeddings": true,
//   "method": "rtn",                       // how each spec was applied (mx.quantize grid)
//   "metric": "mean_kl_nats",
//   "dtype": "bf16",                       // weights rounded to it before quantizing; scales,
//                                          // biases and float tensors are stored in it
//   "calibration": {"source": "<file or dir>", "files": [...], "sha256": "<hex of the text>",
//                   "seq_len": 128, "windows": 8, "tokens_scored": 1016},
//   "specs": [{"mode": "affine", "bits": 4, "group_size": 64}, ...],
//   "params_total": N,                     // every tensor of the model (logical)
//   "fixed_params": n, "fixed_bytes": b,   // tensors that are never quantized, at dtype
//   "rotation": null | {"r1": "hadamard", "r2": "hadamard", "seed": 0},  // measured on the
//                                          // rotation-folded model (absent in older files: null)
//   "scaled_above_bits": 4,                // affine specs wider than this were not run through
//                                          // the network (0: every spec was; absent: 0)
//   "modules": [                           // model order; only finished modules appear
//     {"name": "model.layers.0.self_attn.q_proj", "role": "attn_q", "layer": 0,
//      "shape": [576, 576], "params": 331776, "float_bytes": 663552, "seconds": 12.3,
//      "specs": [{"mode": "affine", "bits": 4, "group_size": 64, "kl": 1.2e-4,
//                 "bytes": 186624, "bpw": 4.5}, ...]}, ...]
//   (a scaled spec also has "scaled_from_bits": 4: its kl is that spec's measured kl times the
//   ratio of the two specs' squared weight errors, sum (W_q - W)^2)
// }
// A spec whose group does not divide the module's input width is absent from that module.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "recipe/allocate.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace tq {

inline constexpr int kSensitivityVersion = 1;

struct SpecKl {
  QuantSpec spec;
  double kl = 0;
  uint64_t bytes = 0;
  int scaled_from_bits = 0;  // 0: measured; else scaled from the measured spec of these bits
};

struct ModuleSensitivity {
  std::string name;  // module path (the weight name without ".weight")
  TensorRole role = TensorRole::kAttnQ;
  int64_t layer = -1;
  Shape shape;
  uint64_t params = 0;
  uint64_t float_bytes = 0;
  double seconds = 0;
  std::vector<SpecKl> specs;
};

struct CalibrationInfo {
  std::string source;
  std::vector<std::string> files;
  std::string sha256;
  int64_t seq_len = 0;
  int64_t windows = 0;
  int64_t tokens_scored = 0;
  bool operator==(const CalibrationInfo&) const = default;
};

struct SensitivityTable {
  std::string model;
  std::string model_fingerprint;
  std::string family;
  bool tie_word_embeddings = false;
  DType dtype = DType::kBF16;
  CalibrationInfo calibration;
  std::vector<QuantSpec> specs;
  uint64_t params_total = 0;
  uint64_t fixed_params = 0;
  uint64_t fixed_bytes = 0;
  // null: measured on the source as it is; else the rotation folded in first
  // ({"r1": "hadamard", "r2": "hadamard", "seed": 0}), which --rotate-weights must match.
  nlohmann::json rotation;
  int scaled_above_bits = 0;  // affine specs wider than this are scaled, not measured (0: none)
  std::vector<ModuleSensitivity> modules;

  const ModuleSensitivity* find(const std::string& name) const;
};

nlohmann::json sensitivity_to_json(const SensitivityTable& t);
// `path` names the file in errors.
Result<SensitivityTable> sensitivity_from_json(const nlohmann::json& j, const std::string& path);
Result<SensitivityTable> read_sensitivity(const std::string& path);
// Writes path.tmp, flushes it to disk and renames it over `path`: a kill leaves the old or the
// new file, never a torn one.
Status write_sensitivity(const std::string& path, const SensitivityTable& t);

// The allocation input: one AllocModule per module with its measured specs as options, plus
// (fixed_params, fixed_bytes) for the budget. Float is an option only when `with_float`.
std::vector<AllocModule> alloc_modules(const SensitivityTable& t, bool with_float = false);

// Allocation over a measured table: budget.fixed_params/fixed_bytes are taken from the table
// when the caller leaves them 0. Errors when the table has no module or a pin names none.
Result<AllocPlan> allocate_from_table(const SensitivityTable& t, const AllocConstraints& cons,
                                      AllocBudget budget, bool with_float = false);

// The plan as JSON: {"bpw", "bytes", "params", "budget_bytes", "predicted_kl", "exact",
// "unit_bytes", "modules": [{"name", "role", "spec" (null = float), "kl", "bytes"}],
// "spec_counts": {"affine 4-bit g64": 120, ...}}.
nlohmann::json alloc_plan_json(const AllocPlan& p);

// "affine,mxfp4" x "2,3,4" x "64,128" -> specs: affine takes each bit width at each group
// size; an fp mode (fixed width) is added once at its own bits and group size.
Result<std::vector<QuantSpec>> candidate_specs(const std::vector<std::string>& modes,
                                               const std::vector<int>& bits,
                                               const std::vector<int>& group_sizes);

}  // namespace tq
