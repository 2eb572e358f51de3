#include "io/tensor_source.h"

#include <algorithm>

namespace tq {

const TensorInfo* TensorSource::find(const std::string& name) const {
  const auto& ts = tensors();
  auto it = std::lower_bound(ts.begin(), ts.end(), name,
                             [](const TensorInfo& t, const std::string& n) { return t.name < n; });
  return (it != ts.end() && it->name == name) ? &*it : nullptr;
}

}  // namespace tq
