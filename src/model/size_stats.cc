#include "model/model_source.h"

namespace tq {

std::string_view source_kind_name(SourceKind k) {
  switch (k) {
    case SourceKind::kHfDir:
      return "hf";
    case SourceKind::kMlxDir:
      return "mlx";
    case SourceKind::kGguf:
      return "gguf";
  }
  return "?";
}

SizeStats size_stats(const TensorSource& tensors) { return size_stats(tensors.tensors()); }

SizeStats size_stats(std::span<const TensorInfo> tensors) {
  SizeStats s;
  for (const auto& t : tensors) {
    s.params += static_cast<uint64_t>(shape_numel(t.shape));
    s.bytes += t.stored_bytes;
  }
  s.bpw = s.params ? 8.0 * static_cast<double>(s.bytes) / static_cast<double>(s.params) : 0.0;
  return s;
}

}  // namespace tq
