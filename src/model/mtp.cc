#include "model/mtp.h"

#include "io/checkpoint_dir.h"
#include "kernels/ops.h"

namespace tq {

std::optional<TensorRole> mtp_layer_role(TensorRole r) {
  using R = TensorRole;
  switch (r) {
    case R::kMtpNormAttn:
      return R::kNormAttn;
    case R::kMtpQ:
      return R::kAttnQ;
    case R::kMtpK:
      return R::kAttnK;
    case R::kMtpV:
      return R::kAttnV;
    case R::kMtpO:
      return R::kAttnO;
    case R::kMtpQNorm:
      return R::kQNorm;
    case R::kMtpKNorm:
      return R::kKNorm;
    case R::kMtpNormMlp:
      return R::kNormMlp;
    case R::kMtpGate:
      return R::kMlpGate;
    case R::kMtpUp:
      return R::kMlpUp;
    case R::kMtpDown:
      return R::kMlpDown;
    default:
      return std::nullopt;
  }
}

void mtp_fc_input(const float* emb, const float* hidden, const std::vector<float>& w_emb,
                  const std::vector<float>& w_hidden, int64_t n, int64_t d, float eps, float* in) {
  for (int64_t i = 0; i < n; ++i) {
    rms_norm(emb + i * d, w_emb.data(), 1, d, eps, in + i * 2 * d);
    rms_norm(hidden + i * d, w_hidden.data(), 1, d, eps, in + i * 2 * d + d);
  }
}

Result<std::unique_ptr<TensorSource>> open_mtp_source(const ModelSource& src, ModelConfig* cfg) {
  if (src.config.family != Family::kQwen35)
    return err("{}: this model type has no MTP head (qwen3_5 only)", src.path);
  if (src.kind == SourceKind::kGguf) return err("{}: a GGUF file carries no MTP head", src.path);
  *cfg = src.config;
  if (src.config.has_mtp) {  // mtp.* beside the trunk's tensors, in the trunk's layout
    TQ_TRY(auto d, DirTensorSource::open(src.path));
    return std::unique_ptr<TensorSource>(std::move(d));
  }
  auto d = DirTensorSource::open_companion(src.path, "mtp");
  if (!d.ok()) return err("no MTP head: no mtp.* tensors, and {}", d.error().message);
  // tq convert writes the companion as applied (mlx-lm's layout: no zero-centred norms).
  cfg->has_mtp = true;
  cfg->hf_layout = false;
  return std::unique_ptr<TensorSource>(std::move(d).value());
}

}  // namespace tq
