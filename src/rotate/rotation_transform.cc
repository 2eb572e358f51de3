#include "rotate/rotation_transform.h"

namespace tq {

Result<std::unique_ptr<RotationTransform>> RotationTransform::create(const ModelConfig& source,
                                                                     const RotationOptions& opts) {
  TQ_TRY(FoldPlan plan, plan_folds(source, opts));
  TQ_TRY(Folder folder, Folder::create(std::move(plan)));
  return std::unique_ptr<RotationTransform>(new RotationTransform(std::move(folder)));
}

}  // namespace tq
