#include "model/f32_model.h"

#include <algorithm>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/rope.h"

namespace tq {

Result<std::unique_ptr<F32Model>> F32Model::load(const ModelSource& src,
                                                 std::function<void(int64_t, int64_t)> progress) {
  if (!src.tensors) return err("{}: model has no tensor source", src.path);
  const ModelConfig& cfg = src.config;
  if (Status st = check_geometry(cfg); !st.ok()) return err("{}: {}", src.path, st.error().message);
  auto inv = rope_inv_freq(cfg);
  if (!inv.ok()) return err("{}: {}", src.path, inv.error().message);
  std::unique_ptr<F32Model> m(new F32Model(cfg));
  m->inv_freq_ = std::move(inv).value();
  auto get = [&](const TensorSpec& s, std::vector<float>& dst) -> Status {
    TQ_TRY(FloatTensor f, src.tensors->load_f32_compute(s.name));
    if (f.shape != s.shape || static_cast<int64_t>(f.data.size()) != shape_numel(s.shape))
      return err("{}: tensor '{}' has shape {}, the config implies {}", src.path, s.name,
                 shape_str(f.shape), shape_str(s.shape));
    dst = std::move(f.data);
    return ok_status();
  };
  TQ_CHECK_OK(load_model_tensors(cfg, m->t_, get, progress));
  return m;
}

std::span<const float> F32Model::weight(TensorRole role, int64_t layer) const {
  if (role == TensorRole::kLmHead) return t_.head();
  std::span<const float> w;
  with_model_tensor(t_, role, layer, [&](const std::vector<float>& v) { w = v; });
  return w;
}

void F32Model::embed(std::span<const int32_t> tokens, float* x, const WeightOverride* ov) const {
  const int64_t d = cfg_.hidden_size;
  const float* e = ov && ov->role == TensorRole::kEmbed ? ov->w : t_.embed.data();
  for (size_t i = 0; i < tokens.size(); ++i)
    std::copy_n(e + static_cast<int64_t>(tokens[i]) * d, d, x + static_cast<int64_t>(i) * d);
}

void F32Model::attention_half(int64_t l, float* x, int64_t n, const WeightOverride* ov,
                              int64_t seqs) const {
  const F32Layer& L = t_.layers[static_cast<size_t>(l)];
  F32Buffers buf;
  F32Io io = buf.bind(cfg_, inv_freq_, x, n, seqs);
  io.weight = ov;
  step_.attn_norm(L, io);
  step_.qkv(L, io);
  step_.attn_core(L, io);
  step_.attn_out(L, io);
}

void F32Model::mlp_half(int64_t l, float* x, int64_t rows, const WeightOverride* ov) const {
  const F32Layer& L = t_.layers[static_cast<size_t>(l)];
  F32Buffers buf;
  F32Io io = buf.bind_mlp(cfg_, x, rows);
  io.weight = ov;
  step_.mlp_norm(L, io);
  step_.mlp_act(L, io);
  step_.mlp_out(L, io);
}

void F32Model::layer(int64_t l, float* x, int64_t n, const WeightOverride* ov, int64_t seqs) const {
  attention_half(l, x, n, ov, seqs);
  mlp_half(l, x, n * seqs, ov);
}

void F32Model::layer(int64_t l, float* x, int64_t n, int64_t seqs, F32Buffers& buf) const {
  F32Io io = buf.bind(cfg_, inv_freq_, x, n, seqs);
  step_.run(t_.layers[static_cast<size_t>(l)], io);
}

void F32Model::head(const float* x, int64_t n, float* logits, const WeightOverride* ov) const {
  const int64_t d = cfg_.hidden_size;
  std::vector<float> h(static_cast<size_t>(n * d));
  rms_norm(x, t_.norm_final.data(), n, d, static_cast<float>(cfg_.rms_norm_eps), h.data());
  const TensorRole role = t_.tied ? TensorRole::kEmbed : TensorRole::kLmHead;
  const float* w = ov && ov->role == role ? ov->w : t_.head().data();
  matmul_nt(h.data(), n, d, w, cfg_.vocab_size, nullptr, logits);
}

}  // namespace tq
