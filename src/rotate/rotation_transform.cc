#include "rotate/rotation_transform.h"

namespace tq {

Result<std::unique_ptr<RotationTransform>> RotationTransform::create(const ModelConfig& source,
                                                                     const RotationOptions& opts,
                                                                     bool save_matrices) {
  TQ_TRY(FoldPlan plan, plan_folds(source, opts));
  TQ_TRY(Folder folder, Folder::create(std::move(plan)));
  return std::unique_ptr<RotationTransform>(
      new RotationTransform(std::move(folder), save_matrices));
}

Result<std::vector<std::pair<std::string, std::string>>> RotationTransform::sidecar_files() const {
  std::vector<std::pair<std::string, std::string>> files;
  files.emplace_back("rotation.json", folder_.rotation_json().dump(2) + "\n");
  if (save_matrices_) {
    TQ_TRY(std::string st, folder_.rotations_safetensors());
    files.emplace_back("rotations.safetensors", std::move(st));
  }
  return files;
}

}  // namespace tq
