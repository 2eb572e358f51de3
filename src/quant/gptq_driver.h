// The layer-streamed GPTQ driver (issue 6 item 2). It holds the calibration activations at
// the input of the current decoder layer (the output of the already quantized layers before
// it) and, per layer, in true-sequential order (FORMATS.md §5.2):
//   A  H_qkv from norm_attn(x)                      → quantize q, k, v (one shared H)
//   B  H_o from attention with the quantized q/k/v  → quantize o
//   C  x_mid = x + o(att); H_gu from norm_mlp(x_mid) → quantize gate, up (one shared H)
//   D  H_down from silu(gate)·up, quantized         → quantize down
//   E  x ← x_mid + down(act): the next layer's input
// With options.gptq.asym a second stream x_f runs the float layers, and every stage also sums
// Δ = (2/n) Σ (x_f − x)xᵀ of its inputs: GPTQ then fits W* = W + WΔH⁻¹ (quant/asym_target.h).
// Only one layer's Hessians exist at a time. Activations live in memory within
// max_calib_memory, else in scratch files. With a checkpoint directory, each finished layer
// leaves its quantized modules and the next layer's input there with a fingerprint, so a
// killed run resumes at the first unfinished layer and produces the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "model/f32_step.h"
#include "model/model_config.h"
#include "quant/activation_store.h"
#include "quant/calib.h"
#include "quant/gptq.h"
#include "quant/hessian.h"
#include "tensor/tensor.h"

namespace tq {

// One quantized linear module (the fields of convert's QuantizedModule).
struct GptqModule {
  std::string name;  // module path, e.g. "model.layers.3.mlp.down_proj"
  Shape shape;       // the float weight's [out, in]
  QuantSpec spec;
  DType scale_dtype = DType::kBF16;
  std::vector<uint8_t> weight, scales, biases;
  nlohmann::json info;  // proxy_loss, rtn_loss, damp, fallback, seconds, guard counters
};

struct GptqProgress {
  int64_t layer = 0, layers = 0;
  std::string module;
  const GptqResult* result = nullptr;    // tensors already moved out; statistics only
  double elapsed_s = 0.0, eta_s = -1.0;  // eta < 0: unknown yet
};

struct GptqDriverOptions {
  GptqOptions gptq;
  int64_t max_calib_memory = int64_t{2} << 30;  // bytes of activations held in RAM
  std::string scratch_dir;                      // spill files (default $TMPDIR or /tmp)
  HessianPrecision hessian = HessianPrecision::kF32Batch;
  std::string checkpoint_dir;  // empty: no checkpoints
  std::string fingerprint;     // identifies source, options and calibration (caller-made)
  std::function<void(const GptqProgress&)> progress;
  // Ranks of an mpirun job (null: this process alone). Calibration rows are cut into blocks of
  // hessian_row_block rows dealt round-robin to the ranks; each rank runs the layer on its
  // rows, rank 0 adds the blocks' Hessians in block order (BlockedHessian), quantizes and
  // broadcasts the dequantized weights. Only rank 0 returns modules and keeps checkpoints.
  Comm* comm = nullptr;
  int64_t hessian_row_block = 16;
  // In the layers of probe_layers, every linear module's weight (as the stage sees it) and the
  // Hessian of its input go to probe before the stage quantizes anything: with no specs the
  // driver runs the float model and probe sees what GPTQ would (convert/gptq_recovery.h).
  std::set<int64_t> probe_layers;
  std::function<Status(int64_t layer, const std::string& weight_name, const FloatTensor& w,
                       std::span<const double> h)>
      probe;
};

class GptqDriver {
 public:
  // Resumes from options.checkpoint_dir when it holds a checkpoint with the same fingerprint;
  // a checkpoint with another fingerprint is an error (the caller removes it or uses a new
  // directory).
  static Result<std::unique_ptr<GptqDriver>> create(const ModelConfig& cfg, const CalibSet& calib,
                                                    GptqDriverOptions options);

  // Layer 0's input: the rows of `embed` [vocab, d] (as the quantized model will see them)
  // for the calibration tokens, and those of `float_embed` for the float stream (asym; null:
  // the same rows). Not needed when resuming past layer 0.
  Status set_embedding(const FloatTensor& embed, const FloatTensor* float_embed = nullptr);

  // Quantizes the linear modules of `layer` named in specs (module path or weight name ->
  // spec); matrices not named stay float and run as float. Layers go in order 0, 1, ...;
  // layers finished in a checkpoint return their stored modules without recomputation.
  Result<std::vector<GptqModule>> quantize_layer(int64_t layer,
                                                 const std::map<std::string, FloatTensor>& tensors,
                                                 const std::map<std::string, QuantSpec>& specs,
                                                 DType dtype);

  // The head's input Hessian: final_norm(x)·norm_weight over the activations after the last
  // layer. Every rank calls it; rank 0 gets H (the others an empty vector). With asym, *delta
  // (when given) receives the head's Δ.
  Result<std::vector<double>> head_hessian(std::span<const float> norm_weight,
                                           std::vector<double>* delta = nullptr);
  // GPTQ of the head against that Hessian, once every layer is done (every rank calls it;
  // rank 0 gets the module, the others an empty one). ridge > 0 adds ridge·mean(diag H) to
  // the diagonal: a tied head is also the embedding, whose lookup error is weight error.
  Result<GptqModule> quantize_head(const std::string& weight_name, const FloatTensor& w,
                                   std::span<const float> norm_weight, const QuantSpec& spec,
                                   DType dtype, double ridge = 0.0);

  int64_t next_layer() const { return next_layer_; }
  int64_t resumed_layers() const { return resumed_layers_; }
  // {"modules", "fallbacks", "escalated", "cholesky_failures", "scale_divergences",
  //  "loss_divergences", "dead_columns", "seconds"}
  nlohmann::json summary() const { return summary_; }
  // The activations after the last quantized layer, [this rank's rows, seq * d].
  const ActivationStore& activations() const { return x_; }

 private:
  GptqDriver() = default;
  Status load_checkpoint();
  Status read_checkpoint(int64_t* next_layer);  // rank 0; -1 when there is none
  Status save_checkpoint(int64_t layer, const std::vector<GptqModule>& mods);
  Result<GptqModule> quantize_module(int64_t layer, const std::string& weight_name,
                                     const FloatTensor& w, const QuantSpec& spec, DType dtype,
                                     const std::vector<double>& h, std::vector<float>* dst);
  Status read_float_stream(int64_t next_layer);  // asym: the checkpoint's x_f

  ModelConfig cfg_;
  std::vector<double> inv_freq_;  // RoPE of cfg_
  GptqDriverOptions opt_;
  Status quantize_shared(int64_t layer, const std::string& weight_name, const FloatTensor& w,
                         const QuantSpec& spec, DType dtype, BlockedHessian& acc,
                         std::vector<float>* dst, std::vector<GptqModule>* out);
  bool root() const { return opt_.comm == nullptr || opt_.comm->rank() == 0; }

  int64_t rows_ = 0, seq_ = 0;
  std::vector<int32_t> tokens_;   // [rows, seq]
  std::vector<int64_t> my_rows_;  // the calibration rows this rank runs, increasing
  ActivationStore x_;             // [my_rows_.size(), seq * d]
  bool asym_ = false;             // options.gptq.asym, outside probing
  ActivationStore xf_;            // asym: the float model's stream, as x_
  bool have_input_ = false;
  int64_t next_layer_ = 0, resumed_layers_ = 0;
  double seconds_ = 0.0;  // spent in quantize_layer, over runs (checkpointed)
  double layer_t0_ = 0.0;
  nlohmann::json summary_;
};

// Checkpoint of one layer's modules: "<8-byte LE header length><JSON header><data>", the
// header listing each module's fields and [offset, nbytes] of weight/scales/biases.
Status write_modules_file(const std::string& path, const std::vector<GptqModule>& mods);
Result<std::vector<GptqModule>> read_modules_file(const std::string& path);

}  // namespace tq
