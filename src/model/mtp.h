// qwen3_5's multi-token-prediction head (docs/QWEN35.md "The MTP companion"): its tensors, where
// they are read from, and how they fill a decoder layer that the runtimes' one layer step runs.
// Draft logits for the token after next, from the trunk's hidden state h_t (before the final
// norm) at position t and the token at t + 1:
//   x = fc · [rms_norm(embed(token_{t+1})) | rms_norm(h_t)]      fc [d, 2d]
//   x = decoder layer (gated full attention at position t, its own KV cache; MLP)
//   logits = head(rms_norm(x) with mtp.norm)                    the trunk's lm_head
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "base/result.h"
#include "io/tensor_source.h"
#include "model/layer.h"
#include "model/model_config.h"
#include "model/model_source.h"
#include "model/tensor_table.h"

namespace tq {

template <typename M>
struct MtpTensors {
  M fc;                                                  // [d, 2d]: [embedding | hidden] -> d
  std::vector<float> norm_emb, norm_hidden, norm_final;  // [d]
  LayerTensors<M> layer;                                 // gated full attention + MLP
};

// The decoder-layer role an MTP row fills in MtpTensors::layer (kMtpQ -> kAttnQ, ...), or
// nullopt for the rows outside it (fc, the pre-fc norms, the final norm) and non-MTP roles.
std::optional<TensorRole> mtp_layer_role(TensorRole r);

// Where a model's MTP companion is: the trunk's own files when they hold mtp.* (a Hugging Face
// checkpoint: cfg.has_mtp), else the artifact's mtp.safetensors (what `tq convert` writes). The
// config to read it with (has_mtp set, the layout of those tensors) comes back in `cfg`.
Result<std::unique_ptr<TensorSource>> open_mtp_source(const ModelSource& src, ModelConfig* cfg);

// in [n, 2d] = [rms_norm(emb)·w_emb | rms_norm(hidden)·w_hidden], row by row: fc's input.
void mtp_fc_input(const float* emb, const float* hidden, const std::vector<float>& w_emb,
                  const std::vector<float>& w_hidden, int64_t n, int64_t d, float eps, float* in);

// Fills `m` from the companion rows `cfg` implies: get(spec, field) -> Status loads one into
// its field (M& or std::vector<float>&), as load_model_tensors does for the trunk.
template <typename M, typename Get>
Status load_mtp_tensors(const ModelConfig& cfg, MtpTensors<M>& m, Get&& get) {
  m.layer.linear = false;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    if (!s.kind->companion()) continue;
    Status st = ok_status();
    auto load = [&](auto& field) {
      st = get(s, field);
      if (st.ok()) finish_loaded(s, field);
    };
    using R = TensorRole;
    if (std::optional<R> lr = mtp_layer_role(s.kind->role))
      with_layer_tensor(m.layer, *lr, load);
    else if (s.kind->role == R::kMtpFc)
      load(m.fc);
    else if (s.kind->role == R::kMtpNormEmb)
      load(m.norm_emb);
    else if (s.kind->role == R::kMtpNormHidden)
      load(m.norm_hidden);
    else if (s.kind->role == R::kMtpNormFinal)
      load(m.norm_final);
    if (!st.ok()) return st;
  }
  return ok_status();
}

}  // namespace tq
