// Round-to-nearest quantization: exactly what mx.quantize produces for the weight cast to the
// output dtype (mlx-lm's convert casts, then quantizes).
#pragma once

#include "model/weight_stages.h"
#include "quant/grid_search.h"

namespace tq {

class RtnQuantizer : public LayerQuantizer {
 public:
  // kSearch: affine grids minimise each group's squared weight error (no calibration here).
  explicit RtnQuantizer(GridChoice grid = GridChoice::kMinMax) : grid_(grid) {}
  Result<std::vector<QuantizedModule>> quantize(int64_t layer, const TensorMap& tensors,
                                                const std::map<std::string, QuantSpec>& specs,
                                                DType dtype) override;
  nlohmann::json metadata() const override {
    if (grid_ == GridChoice::kMinMax) return {{"method", "rtn"}};
    return {{"method", "rtn"}, {"grid", grid_choice_name(grid_)}};
  }

 private:
  GridChoice grid_;
};

// One matrix through the same path (exposed for GPTQ's fallbacks and tests): w is rounded to
// `dtype` first, then quantized as mx.quantize does. `tensor_name` ends in ".weight".
Result<QuantizedModule> rtn_quantize_matrix(const std::string& tensor_name, const FloatTensor& w,
                                            const QuantSpec& spec, DType dtype,
                                            GridChoice grid = GridChoice::kMinMax);

}  // namespace tq
