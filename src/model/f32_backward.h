// Gradients of the f32 decoder with respect to its weights (llama / qwen2 / qwen3
// attention layers): forward() runs F32Step's stages (model/layer.h) and keeps what backward()
// reads; backward() walks the same stages in reverse. Distillation (quant/distill.h) trains
// quantized scales and biases from these gradients.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/result.h"
#include "base/thread_pool.h"
#include "model/f32_step.h"

namespace tq {

// Receives dL/dW [out, in] of one matrix (layer -1 for the globals), or of an RMSNorm's weight
// as [1, width]. A tied embedding is reported once, as kEmbed, its lookup's and its head's
// gradients summed.
using MatrixGrad =
    std::function<void(TensorRole role, int64_t layer, const float* dw, int64_t out, int64_t in)>;
using WantsGrad = std::function<bool(TensorRole role, int64_t layer)>;

class F32Backprop {
 public:
  // An error naming what the backward does not implement (Gated DeltaNet, gated attention).
  static Status supports(const ModelConfig& c);
  // `pool` (may be null: one thread) runs the element-wise and per-row work between the
  // products; the products are OpenBLAS's, threaded by it.
  F32Backprop(const ModelConfig& c, std::vector<double> inv_freq, ThreadPool* pool = nullptr)
      : c_(c), inv_freq_(std::move(inv_freq)), step_(c), pool_(pool) {}

  // logits [seqs * n, vocab] of `seqs` sequences of n tokens each (positions from 0), keeping
  // every layer's activations for backward().
  void forward(const F32Tensors& t, std::span<const int32_t> tokens, int64_t n, int64_t seqs,
               float* logits);
  // From dL/dlogits [rows, vocab] of the last forward(): grad() for every matrix wants() names.
  // `t` must hold the weights forward() ran with.
  void backward(const F32Tensors& t, const float* dlogits, const WantsGrad& wants,
                const MatrixGrad& grad);

 private:
  struct Saved {  // one layer's activations, [rows, width] each
    std::vector<float> x, h1, q, k, v, att, x1, h2, up, act;
  };
  void layer_backward(const F32Tensors& t, int64_t l, float* dx, const WantsGrad& wants,
                      const MatrixGrad& grad);
  void attention_backward(const Saved& s, const float* datt, float* dq, float* dk, float* dv);
  // dx += a norm's backward of dy over all rows; its weight's gradient to grad() when wanted.
  void norm_backward(const WantsGrad& wants, const MatrixGrad& grad, TensorRole role, int64_t layer,
                     const float* x, const float* w, int64_t rows, int64_t d, const float* dy,
                     float* dx) const;
  // fn(begin, end) over [0, n), on the pool when there is one; `per_thread` slices each even
  // out rows of unequal cost.
  void parallel(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                int per_thread = 1) const;

  ModelConfig c_;
  std::vector<double> inv_freq_;
  F32Step step_;
  F32Buffers buf_;
  int64_t n_ = 0, seqs_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<Saved> saved_;
  std::vector<float> xf_, hf_;  // the final norm's input and output
  ThreadPool* pool_ = nullptr;
  // Kept between steps: a step's buffers are the same size every time, and fresh pages of a
  // new allocation cost the kernel's zeroing.
  std::vector<float> dh_, dx_, dtable_, dact_, g_, datt_, dq_, dk_, dv_, scratch_, cs_, sn_, lin_,
      dlin_, p_, dp_;
};

}  // namespace tq
