#include "quant/gptq_quantizer.h"

#include <cmath>

#include "formats/mlx_float.h"
#include "model/tensor_table.h"

namespace tq {

namespace {

void drop_seconds(nlohmann::json& j) {
  if (j.is_object()) j.erase("seconds");
}

QuantizedModule from_gptq(GptqModule g, bool record_timings) {
  QuantizedModule m;
  m.name = std::move(g.name);
  m.shape = std::move(g.shape);
  m.spec = g.spec;
  m.scale_dtype = g.scale_dtype;
  m.weight = std::move(g.weight);
  m.scales = std::move(g.scales);
  m.biases = std::move(g.biases);
  m.info = std::move(g.info);
  if (!record_timings) drop_seconds(m.info);
  return m;
}

}  // namespace

FloatTensor as_stored(const FloatTensor& t, DType dtype) {
  FloatTensor r = t;
  if (dtype != DType::kF32)
    for (float& v : r.data) v = round_to_dtype(v, dtype);
  return r;
}

Result<std::unique_ptr<GptqQuantizer>> GptqQuantizer::create(
    const ModelConfig& cfg, const CalibSet& calib, GptqDriverOptions options,
    std::function<Result<FloatTensor>(TensorRole)> load_source, bool record_timings,
    double tied_head_ridge) {
  if (!(tied_head_ridge >= 0.0) || !std::isfinite(tied_head_ridge))
    return err("gptq: tied-head ridge {} is not a finite number >= 0", tied_head_ridge);
  std::unique_ptr<GptqQuantizer> q(new GptqQuantizer());
  q->options_ = {{"block", options.gptq.block},
                 {"damp", options.gptq.damp},
                 {"max_damp", options.gptq.max_damp},
                 {"act_order", options.gptq.act_order},
                 {"scale_guard", options.gptq.scale_guard},
                 {"grid", grid_choice_name(options.gptq.grid)},
                 {"refit", options.gptq.refit},
                 {"asym", options.gptq.asym},
                 {"hessian", options.hessian == HessianPrecision::kF64 ? "f64" : "f32-batch"}};
  q->calib_record_ = calib.info();
  q->load_source_ = std::move(load_source);
  q->record_timings_ = record_timings;
  for (const TensorKind& k : family_table(cfg.family)) {
    if (k.role == TensorRole::kEmbed) q->embed_name_ = tensor_name(k, -1);
    if (k.role == TensorRole::kLmHead) q->head_name_ = tensor_name(k, -1);
    if (k.role == TensorRole::kNormFinal) q->norm_name_ = tensor_name(k, -1);
  }
  q->layers_ = cfg.num_hidden_layers;
  if (cfg.tie_word_embeddings) q->tied_ridge_ = tied_head_ridge;
  q->grid_ = options.gptq.grid;
  TQ_TRY(q->driver_, GptqDriver::create(cfg, calib, std::move(options)));
  return q;
}

Result<std::vector<QuantizedModule>> GptqQuantizer::quantize(
    int64_t layer, const TensorMap& tensors, const std::map<std::string, QuantSpec>& specs,
    DType dtype) {
  std::vector<QuantizedModule> out;
  if (layer < 0) {  // globals by RTN; the embedding as the output model decodes it feeds layer 0
    if (auto n = tensors.find(norm_name_); n != tensors.end()) final_norm_ = n->second.data;
    for (const auto& [name, spec] : specs) {
      auto it = tensors.find(name);
      if (it == tensors.end()) return err("globals: no tensor '{}' to quantize", name);
      const FloatTensor w = as_stored(it->second, dtype);
      const bool tied_head = name == embed_name_ && tied_ridge_ > 0.0;
      if (name == head_name_ && !tied_head) {  // GPTQ once the layers are done: now or later
        deferred_name_ = name;
        head_ = w;
        head_spec_ = spec;
        head_dtype_ = dtype;
        if (driver_->next_layer() == layers_) TQ_CHECK_OK(quantize_head(&out));
        continue;
      }
      if (w.shape.size() != 2) return err("globals: '{}' is not a matrix", name);
      TQ_TRY(RtnResult r, rtn_quantize(w.data, w.shape[0], w.shape[1], spec, dtype, grid_));
      if (name == embed_name_ && !embedding_set_) {
        TQ_CHECK_OK(driver_->set_embedding(FloatTensor{w.shape, std::move(r.dequantized)}, &w));
        embedding_set_ = true;
      }
      if (tied_head) {  // RTN feeds layer 0; the written codes come from the head's GPTQ
        deferred_name_ = name;
        head_ = w;
        head_spec_ = spec;
        head_dtype_ = dtype;
        if (driver_->next_layer() == layers_) TQ_CHECK_OK(quantize_head(&out));
        continue;
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
      TQ_CHECK_OK(driver_->set_embedding(as_stored(it->second, dtype)));
      embedding_set_ = true;
    }
    return out;
  }
  if (!embedding_set_ && driver_->next_layer() == 0) {
    if (!load_source_) return err("gptq: layer {} before the embedding was seen", layer);
    TQ_TRY(FloatTensor e, load_source_(TensorRole::kEmbed));
    TQ_CHECK_OK(driver_->set_embedding(as_stored(e, dtype)));
    embedding_set_ = true;
  }
  TensorMap r;
  for (const auto& [name, t] : tensors) r[name] = as_stored(t, dtype);
  TQ_TRY(std::vector<GptqModule> mods, driver_->quantize_layer(layer, r, specs, dtype));
  for (GptqModule& g : mods) out.push_back(from_gptq(std::move(g), record_timings_));
  if (head_ && layer == layers_ - 1) TQ_CHECK_OK(quantize_head(&out));
  return out;
}

Status GptqQuantizer::quantize_head(std::vector<QuantizedModule>* out) {
  if (final_norm_.empty() && load_source_) {  // untransformed: the source's norm is the one
    TQ_TRY(FloatTensor n, load_source_(TensorRole::kNormFinal));
    final_norm_ = std::move(n.data);
  }
  if (final_norm_.empty()) return err("gptq: the head came before the final norm '{}'", norm_name_);
  const double ridge = deferred_name_ == head_name_ ? 0.0 : tied_ridge_;
  TQ_TRY(GptqModule g, driver_->quantize_head(deferred_name_, *head_, final_norm_, head_spec_,
                                              head_dtype_, ridge));
  if (ridge > 0.0) g.info["tied_ridge"] = ridge;
  head_.reset();
  if (!g.name.empty()) out->push_back(from_gptq(std::move(g), record_timings_));  // rank 0's
  return ok_status();
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
