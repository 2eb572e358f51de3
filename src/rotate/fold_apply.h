// Executes a FoldPlan on f32 tensors, the globals once and then one decoder layer at a time
// (the convert pipeline's WeightTransform seam), and records how the rotations were made.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "model/weight_stages.h"
#include "rotate/fold_plan.h"
#include "rotate/rotation.h"
#include "tensor/tensor.h"

namespace tq {

class Folder {
 public:
  // Builds R1 (R2 is built per layer, from the seed).
  static Result<Folder> create(FoldPlan plan);

  const FoldPlan& plan() const { return plan_; }
  // Needs model.embed_tokens.weight and model.norm.weight (and lm_head.weight when untied);
  // creates lm_head.weight when the plan unties.
  Status apply_globals(TensorMap& globals) const;
  // Needs every planned tensor of `layer`; others in the map are left as they are.
  Status apply_layer(int64_t layer, TensorMap& layer_tensors) const;

  // For tq_metadata.json: kind, seed, K, construction and signs of every rotation.
  nlohmann::json metadata() const;
  // rotation.json: the metadata plus what a user needs to rebuild R1/R2 exactly (H_K rows, the
  // RNG and seed streams, the formulas).
  nlohmann::json rotation_json() const;
  // rotations.safetensors bytes: "r1" [n, n] and "r2.layers.{L}" [h, h], F64 (--save-rotations).
  Result<std::string> rotations_safetensors() const;

 private:
  explicit Folder(FoldPlan plan) : plan_(std::move(plan)) {}
  Status apply(const TensorFold& f, int64_t layer, TensorMap& t, const Rotation* r2) const;

  FoldPlan plan_;
  Rotation r1_;
};

}  // namespace tq
