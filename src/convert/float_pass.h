// The float model (the conversion's transforms applied) through a GptqDriver with no specs:
// nothing is quantized, and the driver's probe sees every linear module's weight with the
// Hessian of its float input. Used by run_convert as its LayerQuantizer (write_output off) to
// measure what GPTQ recovers (gptq_recovery.h) and the channel scales (channel_scale_run.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/weight_stages.h"
#include "quant/gptq_driver.h"
#include "quant/gptq_quantizer.h"

namespace tq {

// The float model through the driver (no specs: nothing is quantized), the embedding as the
// transforms leave it feeding layer 0. With a head to sample (head_rows > 0), every layer runs
// and on_head gets up to head_rows evenly spaced rows of it with its input Hessian; else the
// layers past the last sampled one are skipped.
class FloatPass : public LayerQuantizer {
 public:
  struct Names {
    std::string embed, head, norm;
  };
  FloatPass(GptqDriver* driver, Names names, int64_t layers, int64_t last_layer, int64_t head_rows,
            std::function<void(int64_t)> layer_done,
            std::function<Status(const FloatTensor&, std::span<const double>)> on_head)
      : driver_(driver),
        n_(std::move(names)),
        layers_(layers),
        last_(head_rows > 0 ? layers - 1 : last_layer),
        head_rows_(head_rows),
        layer_done_(std::move(layer_done)),
        on_head_(std::move(on_head)) {}

  Result<std::vector<QuantizedModule>> quantize(int64_t layer, const TensorMap& tensors,
                                                const std::map<std::string, QuantSpec>&,
                                                DType dtype) override {
    if (layer < 0) {
      auto it = tensors.find(n_.embed);
      if (it != tensors.end() && !embedded_) {
        TQ_CHECK_OK(driver_->set_embedding(as_stored(it->second, dtype)));
        embedded_ = true;
      }
      if (auto nrm = tensors.find(n_.norm); nrm != tensors.end()) norm_ = nrm->second.data;
      if (auto h = tensors.find(n_.head); h != tensors.end() && head_rows_ > 0) {
        head_ = sample_rows(as_stored(h->second, dtype));
      }
      // The head needs the final norm and every layer: without transforms each global is its
      // own group, so a tied head (the embedding) arrives first and the norm last.
      if (head_ && !norm_.empty() && driver_->next_layer() == layers_) TQ_CHECK_OK(measure_head());
      return std::vector<QuantizedModule>();
    }
    if (layer > last_) return std::vector<QuantizedModule>();
    if (!embedded_) return err("float pass: layer {} before the embedding", layer);
    TensorMap r;
    for (const auto& [name, t] : tensors) r[name] = as_stored(t, dtype);
    TQ_TRY(std::vector<GptqModule> none, driver_->quantize_layer(layer, r, {}, dtype));
    if (layer_done_) layer_done_(layer);
    if (head_ && !norm_.empty() && layer == layers_ - 1) TQ_CHECK_OK(measure_head());
    return std::vector<QuantizedModule>();
  }
  nlohmann::json metadata() const override { return nullptr; }

 private:
  FloatTensor sample_rows(const FloatTensor& w) const {
    const int64_t rows = w.shape[0], cols = w.shape[1], k = std::min(rows, head_rows_);
    FloatTensor out{{k, cols}, std::vector<float>(static_cast<size_t>(k * cols))};
    for (int64_t i = 0; i < k; ++i)
      std::copy_n(w.data.data() + i * rows / k * cols, cols, out.data.data() + i * cols);
    return out;
  }
  Status measure_head() {
    TQ_TRY(std::vector<double> h, driver_->head_hessian(norm_));
    TQ_CHECK_OK(on_head_(*head_, h));
    head_.reset();
    return ok_status();
  }

  GptqDriver* driver_;
  Names n_;
  int64_t layers_, last_, head_rows_;
  std::function<void(int64_t)> layer_done_;
  std::function<Status(const FloatTensor&, std::span<const double>)> on_head_;
  std::optional<FloatTensor> head_;
  std::vector<float> norm_;
  bool embedded_ = false;
};

}  // namespace tq
