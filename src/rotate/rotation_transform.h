// The rotation folds as a convert-pipeline stage (model/weight_stages.h WeightTransform): a thin
// adapter over Folder, planned from the SOURCE config (before edit_config unties it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/weight_stages.h"
#include "rotate/fold_apply.h"

namespace tq {

class RotationTransform : public WeightTransform {
 public:
  // save_matrices: also write rotations.safetensors (R1 and every layer's R2) as a sidecar.
  static Result<std::unique_ptr<RotationTransform>> create(const ModelConfig& source,
                                                           const RotationOptions& opts,
                                                           bool save_matrices = false);

  std::vector<std::string> describe() const override { return describe_plan(folder_.plan()); }
  Status edit_config(nlohmann::json& config) const override {
    return fold_config(folder_.plan(), config);
  }
  Status apply_globals(TensorMap& globals) override { return folder_.apply_globals(globals); }
  Status apply_layer(int64_t layer, TensorMap& t) override { return folder_.apply_layer(layer, t); }
  nlohmann::json metadata() const override { return folder_.metadata(); }
  // True when R1 unties a tied head: the output holds an lm_head the source did not.
  bool unties_head() const { return folder_.plan().untie; }
  // rotation.json (+ rotations.safetensors when save_matrices).
  Result<std::vector<std::pair<std::string, std::string>>> sidecar_files() const override;

 private:
  RotationTransform(Folder f, bool save_matrices)
      : folder_(std::move(f)), save_matrices_(save_matrices) {}
  Folder folder_;
  bool save_matrices_ = false;
};

}  // namespace tq
