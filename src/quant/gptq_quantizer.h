// The GPTQ LayerQuantizer for tq convert: the embedding by RTN, decoder layers through
// GptqDriver, then the head by GPTQ on the last layer's output. The embedding as RTN decodes
// it is the first layer's input; a tied embedding (the head too) is written by the head's GPTQ
// when tied_head_ridge > 0 (its Hessian's diagonal raised for the lookup, gptq_driver.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "model/tensor_table.h"
#include "model/weight_stages.h"
#include "quant/gptq_driver.h"

namespace tq {

// The values as the output checkpoint holds them: convert writes floats in dtype and quantizes
// each weight after that cast, so GPTQ starts from the same matrix RTN would quantize.
FloatTensor as_stored(const FloatTensor& t, DType dtype);

class GptqQuantizer : public LayerQuantizer {
 public:
  // load_source(role): the source's tensor of a global role as f32, for layer 0's input when the
  // globals never reach quantize() (embedding kept float) and for a final norm no transform handed
  // over; record_timings = false leaves every time out of the metadata.
  static Result<std::unique_ptr<GptqQuantizer>> create(
      const ModelConfig& cfg, const CalibSet& calib, GptqDriverOptions options,
      std::function<Result<FloatTensor>(TensorRole)> load_source, bool record_timings,
      double tied_head_ridge = 0.0);
  Result<std::vector<QuantizedModule>> quantize(int64_t layer, const TensorMap& tensors,
                                                const std::map<std::string, QuantSpec>& specs,
                                                DType dtype) override;
  nlohmann::json metadata() const override;

 private:
  GptqQuantizer() = default;
  std::unique_ptr<GptqDriver> driver_;
  std::function<Result<FloatTensor>(TensorRole)> load_source_;
  bool embedding_set_ = false, record_timings_ = true;
  GridChoice grid_ = GridChoice::kMinMax;  // of the RTN globals too
  nlohmann::json calib_record_, options_;
  std::string embed_name_;  // the embedding's name in the output's layout
  // The head goes through GPTQ on the activations after the last layer: it waits here (as
  // stored, with its spec) from the globals until then, with the final norm it reads.
  // deferred_name_: the untied head's name, or the tied embedding's.
  std::string head_name_, norm_name_, deferred_name_;
  double tied_ridge_ = 0.0;  // > 0: the embedding of a tied model is deferred as its head
  std::optional<FloatTensor> head_;
  QuantSpec head_spec_;
  DType head_dtype_ = DType::kBF16;
  std::vector<float> final_norm_;
  int64_t layers_ = 0;
  Status quantize_head(std::vector<QuantizedModule>* out);
};

}  // namespace tq
