#include "quant/gptq_quantizer.h"

#include "formats/mlx_float.h"
#include "model/tensor_table.h"

namespace tq {

namespace {

// Values as the output checkpoint holds them: convert writes floats in dtype and quantizes
// each weight after that cast, so GPTQ starts from the same matrix RTN would quantize.
FloatTensor rounded(const FloatTensor& t, DType dtype) {
  FloatTensor r = t;
  if (dtype != DType::kF32)
    for (float& v : r.data) v = round_to_dtype(v, dtype);
  return r;
}

void drop_seconds(nlohmann::json& j) {
  if (j.is_object()) j.erase("seconds");
}

}  // namespace

Result<std::unique_ptr<GptqQuantizer>> GptqQuantizer::create(
    const ModelConfig& cfg, const CalibSet& calib, GptqDriverOptions options,
    std::function<Result<FloatTensor>()> load_embedding, bool record_timings) {
  std::unique_ptr<GptqQuantizer> q(new GptqQuantizer());
  q->options_ = {{"block", options.gptq.block},
                 {"damp", options.gptq.damp},
                 {"max_damp", options.gptq.max_damp},
                 {"act_order", options.gptq.act_order},
                 {"scale_guard", options.gptq.scale_guard},
                 {"grid", grid_choice_name(options.gptq.grid)},
                 {"refit", options.gptq.refit},
                 {"hessian", options.hessian == HessianPrecision::kF64 ? "f64" : "f32-batch"}};
  q->calib_record_ = calib.info();
  q->load_embedding_ = std::move(load_embedding);
  q->record_timings_ = record_timings;
  for (const TensorKind& k : family_table(cfg.family))
    if (k.role == TensorRole::kEmbed) q->embed_name_ = tensor_name(k, -1);
  q->grid_ = options.gptq.grid;
  TQ_TRY(q->driver_, GptqDriver::create(cfg, calib, std::move(options)));
  return q;
}

Result<std::vector<QuantizedModule>> GptqQuantizer::quantize(
    int64_t layer, const TensorMap& tensors, const std::map<std::string, QuantSpec>& specs,
    DType dtype) {
  std::vector<QuantizedModule> out;
  if (layer < 0) {  // globals by RTN; the embedding as the output model decodes it feeds layer 0
    for (const auto& [name, spec] : specs) {
      auto it = tensors.find(name);
      if (it == tensors.end()) return err("globals: no tensor '{}' to quantize", name);
      const FloatTensor w = rounded(it->second, dtype);
      if (w.shape.size() != 2) return err("globals: '{}' is not a matrix", name);
      TQ_TRY(RtnResult r, rtn_quantize(w.data, w.shape[0], w.shape[1], spec, dtype, grid_));
      if (name == embed_name_ && !embedding_set_) {
        TQ_CHECK_OK(driver_->set_embedding(FloatTensor{w.shape, std::move(r.dequantized)}));
        embedding_set_ = true;
      }
      QuantizedModule m;
      m.name = name.substr(0, name.rfind('.'));
      m.shape = w.shape;
      m.spec = spec;
      m.scale_dtype = spec.mode == QuantMode::kAffine ? dtype : DType::kU8;
      m.weight = std::move(r.weight);
      m.scales = std::move(r.scales);
      m.biases = std::move(r.biases);
      m.info = {{"method", "rtn"}};
      out.push_back(std::move(m));
    }
    auto it = tensors.find(embed_name_);
    if (it != tensors.end() && !embedding_set_) {  // a float embedding seen by a transform
      TQ_CHECK_OK(driver_->set_embedding(rounded(it->second, dtype)));
      embedding_set_ = true;
    }
    return out;
  }
  if (!embedding_set_ && driver_->next_layer() == 0) {
    if (!load_embedding_) return err("gptq: layer {} before the embedding was seen", layer);
    TQ_TRY(FloatTensor e, load_embedding_());
    TQ_CHECK_OK(driver_->set_embedding(rounded(e, dtype)));
    embedding_set_ = true;
  }
  TensorMap r;
  for (const auto& [name, t] : tensors) r[name] = rounded(t, dtype);
  TQ_TRY(std::vector<GptqModule> mods, driver_->quantize_layer(layer, r, specs, dtype));
  for (GptqModule& g : mods) {
    QuantizedModule m;
    m.name = std::move(g.name);
    m.shape = std::move(g.shape);
    m.spec = g.spec;
    m.scale_dtype = g.scale_dtype;
    m.weight = std::move(g.weight);
    m.scales = std::move(g.scales);
    m.biases = std::move(g.biases);
    m.info = std::move(g.info);
    if (!record_timings_) drop_seconds(m.info);
    out.push_back(std::move(m));
  }
  return out;
}

nlohmann::json GptqQuantizer::metadata() const {
  nlohmann::json guards = driver_->summary();
  guards.erase("spilled");  // depends on the memory budget, not on the result
  if (!record_timings_) drop_seconds(guards);
  return {{"method", "gptq"},
          {"options", options_},
          {"calibration", calib_record_},
          {"guards", guards}};
}

}  // namespace tq
