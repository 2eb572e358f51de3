// The rotation folds as a convert-pipeline stage (convert/stages.h WeightTransform): a thin
// adapter over Folder, planned from the SOURCE config (before edit_config unties it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "convert/stages.h"
#include "rotate/fold_apply.h"

namespace tq {

class RotationTransform : public WeightTransform {
 public:
  static Result<std::unique_ptr<RotationTransform>> create(const ModelConfig& source,
                                                           const RotationOptions& opts);

  std::vector<std::string> describe() const override { return describe_plan(folder_.plan()); }
  Status edit_config(nlohmann::json& config) const override {
    return fold_config(folder_.plan(), config);
  }
  Status apply_globals(TensorMap& globals) override { return folder_.apply_globals(globals); }
  Status apply_layer(int64_t layer, TensorMap& t) override { return folder_.apply_layer(layer, t); }
  nlohmann::json metadata() const override { return folder_.metadata(); }

  const Folder& folder() const { return folder_; }

 private:
  explicit RotationTransform(Folder f) : folder_(std::move(f)) {}
  Folder folder_;
};

}  // namespace tq
