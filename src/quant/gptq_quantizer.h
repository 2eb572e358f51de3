// The GPTQ LayerQuantizer for tq convert: globals (embedding, untied lm_head) by RTN, decoder
// layers through GptqDriver. The embedding as the quantized model decodes it is the first
// layer's input.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "model/weight_stages.h"
#include "quant/gptq_driver.h"

namespace tq {

// The values as the output checkpoint holds them: convert writes floats in dtype and quantizes
// each weight after that cast, so GPTQ starts from the same matrix RTN would quantize.
FloatTensor as_stored(const FloatTensor& t, DType dtype);

class GptqQuantizer : public LayerQuantizer {
 public:
  // load_embedding: where layer 0's input comes from when the globals never reach quantize()
  // (embedding kept float); record_timings = false leaves every time out of the metadata.
  static Result<std::unique_ptr<GptqQuantizer>> create(
      const ModelConfig& cfg, const CalibSet& calib, GptqDriverOptions options,
      std::function<Result<FloatTensor>()> load_embedding, bool record_timings);
  Result<std::vector<QuantizedModule>> quantize(int64_t layer, const TensorMap& tensors,
                                                const std::map<std::string, QuantSpec>& specs,
                                                DType dtype) override;
  nlohmann::json metadata() const override;

 private:
  GptqQuantizer() = default;
  std::unique_ptr<GptqDriver> driver_;
  std::function<Result<FloatTensor>()> load_embedding_;
  bool embedding_set_ = false, record_timings_ = true;
  GridChoice grid_ = GridChoice::kMinMax;  // of the RTN globals too
  nlohmann::json calib_record_, options_;
  std::string embed_name_;  // the embedding's name in the output's layout
  // An untied head goes through GPTQ on the activations after the last layer: it waits here
  // (as stored, with its spec) from the globals until then, with the final norm it reads.
  std::string head_name_, norm_name_;
  std::optional<FloatTensor> head_;
  QuantSpec head_spec_;
  DType head_dtype_ = DType::kBF16;
  std::vector<float> final_norm_;
  int64_t layers_ = 0;
  Status quantize_head(std::vector<QuantizedModule>* out);
};

}  // namespace tq
