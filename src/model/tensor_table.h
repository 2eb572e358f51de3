// The per-family tensor tables (DESIGN.md "The centre of the design"): for llama, qwen2, qwen3
// and qwen3_5 (two layouts: Hugging Face and mlx-lm's), every tensor name pattern with its role,
// shape, the spaces its axes live in, the norm that feeds it and whether it may be quantized. Every
// pass walks these rows; nobody else parses tensor names.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "io/tensor_source.h"
#include "model/model_config.h"
#include "tensor/tensor.h"

namespace tq {

enum class TensorRole : uint8_t {
  kEmbed,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnO,
  kMlpGate,
  kMlpUp,
  kMlpDown,
  kNormAttn,
  kNormMlp,
  kNormFinal,
  kLmHead,
  kQNorm,
  kKNorm,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kAttnOBias,
  kMlpGateBias,
  kMlpUpBias,
  kMlpDownBias,
  kRopeInvFreq,  // HF buffer some checkpoints carry; never expected, always ignored
  // qwen3_5 Gated DeltaNet (docs/QWEN35.md): in_proj_qkv/z/b/a, the depthwise conv1d [C, K],
  // dt_bias, A_log, the gated RMSNorm's weight, out_proj.
  kLinQkv,
  kLinZ,
  kLinB,
  kLinA,
  kLinConv,
  kLinDtBias,
  kLinALog,
  kLinNorm,
  kLinOut,
  // qwen3_5's multi-token-prediction companion (docs/QWEN35.md "The MTP companion"): fc over
  // [normed embedding | normed hidden], its two pre-fc norms, one gated-attention decoder layer
  // and its final norm (which feeds the trunk's lm_head).
  kMtpFc,
  kMtpNormEmb,
  kMtpNormHidden,
  kMtpNormAttn,
  kMtpQ,
  kMtpK,
  kMtpV,
  kMtpO,
  kMtpQNorm,
  kMtpKNorm,
  kMtpNormMlp,
  kMtpGate,
  kMtpUp,
  kMtpDown,
  kMtpNormFinal,
};
constexpr TensorRole kLastTensorRole = TensorRole::kMtpNormFinal;
std::string_view tensor_role_name(TensorRole r);  // "attn_q", "mlp_down_bias", ...

// Which side of the residual stream a tensor touches.
enum class ResidualSide : uint8_t {
  kNone,    // norms' own vectors, q/k-only spaces, biases off the residual
  kReads,   // input features are the residual (q/k/v, gate/up, lm_head): W <- W·Q under R1
  kWrites,  // output is added to / is the residual (embed rows, o_proj, down_proj, their biases)
};

// The basis one axis lives in; an orthogonal change of that basis must be folded into it.
enum class Space : uint8_t { kNone, kResidual, kHeadValue /* per-head value space (R2) */ };

// Symbolic sizes, resolved against a ModelConfig.
// qwen3_5: kQGateDim = 2·qd (query and gate), kLinConv = C = 2·Hk·dk + Hv·dv, kLinValue = Hv·dv,
// kLinVHeads = Hv, kLinVHeadDim = dv, kConvK = K, kOne = 1.
enum class Dim : uint8_t {
  kHidden,
  kVocab,
  kIntermediate,
  kHeadDim,
  kQDim,
  kKvDim,
  kQGateDim,
  kLinConv,
  kLinValue,
  kLinVHeads,
  kLinVHeadDim,
  kConvK,
  kOne,
  kHidden2,  // 2·hidden (the MTP fc's input)
};
// When a row's tensor exists (kLinear / kFull: in Gated DeltaNet / full-attention layers only;
// kMtp: with qwen3_5's MTP companion, written to its own file beside the model's).
enum class When : uint8_t {
  kAlways,
  kAttentionBias,
  kMlpBias,
  kUntied,
  kIgnored,
  kLinear,
  kFull,
  kMtp
};

struct TensorKind {
  std::string_view pattern;  // exact HF name; "{L}" stands for the decimal layer index
  TensorRole role;
  std::span<const Dim> dims;  // [rows, cols] for matrices, [n] for vectors
  When when;
  ResidualSide side;
  Space row_space;  // space of dim 0 (output features; for the embedding: token ids = none)
  Space col_space;  // space of dim 1 (input features; embedding: residual); kNone for vectors
  std::optional<TensorRole> fed_by;  // the RMSNorm whose output is this matrix's input
  bool quantizable;                  // an MLX QuantizedLinear/QuantizedEmbedding may replace it
  // Stored as w and applied as 1 + w (qwen3_5's Hugging Face norms); loaders add the 1.
  bool zero_centred = false;
  // Stays f32 when written float whatever the output dtype (qwen3_5's A_log, as mlx-lm casts).
  bool keep_f32 = false;
  // The norm feeding the second half of the input features (the MTP fc: [embedding | hidden],
  // each half residual-space); fed_by feeds the first half.
  std::optional<TensorRole> fed_by_hi = std::nullopt;
  // A residual gain that feeds no linear of its own but the trunk's head (the MTP final norm):
  // set to ones under R1, as the seed's fold does (exact only when it equals the final norm's).
  bool ones_under_r1 = false;
  bool per_layer() const { return pattern.find("{L}") != std::string_view::npos; }
  bool companion() const { return when == When::kMtp; }
};

// The table of one family, in model order (globals first, then one layer's rows, then the rest);
// qwen3_5's is mlx-lm's layout. table_for(cfg) picks the layout cfg.hf_layout names.
std::span<const TensorKind> family_table(Family f);
std::span<const TensorKind> table_for(const ModelConfig& cfg);

// Whether row k has a tensor at `layer` (-1: outside the layers) of this geometry.
bool tensor_present(const TensorKind& k, const ModelConfig& cfg, int64_t layer);
// Why a family's table has no per-head value space for R2 (qwen3_5: the attention output
// gate), or empty.
std::string_view r2_off_reason(Family f);

// One concrete tensor a config implies.
struct TensorSpec {
  std::string name;
  Shape shape;
  const TensorKind* kind = nullptr;
  int64_t layer = -1;  // -1 for tensors outside the decoder layers
};

// Every tensor a float HF checkpoint of this geometry holds (biases per family/attention_bias/
// mlp_bias, lm_head only when untied), in model order.
std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg);

struct ClassifiedTensor {
  const TensorKind* kind = nullptr;
  int64_t layer = -1;
};
// Matches `name` against the family's table (the layer index is not range-checked).
std::optional<ClassifiedTensor> classify(std::string_view name, Family f);
std::optional<ClassifiedTensor> classify(std::string_view name, std::span<const TensorKind> table);

// The HF name of a row at a layer: "model.layers.{L}.mlp.up_proj.weight" -> "...3.mlp...".
std::string tensor_name(const TensorKind& k, int64_t layer);
Shape tensor_shape(const TensorKind& k, const ModelConfig& cfg);

// The row of `table` holding the tensor `k` holds in another layout of the same family (the
// same role), or null.
const TensorKind* same_tensor(std::span<const TensorKind> table, const TensorKind& k);
// A tensor read as row `from` stores it, re-expressed as row `to` stores it: the zero-centred
// shift and the shape (qwen3_5's conv1d [C, 1, K] and [C, K, 1] hold the same bytes).
Status change_layout(const TensorKind& from, const TensorKind& to, const Shape& to_shape,
                     FloatTensor& t);

struct TensorCheckReport {
  std::vector<std::string> missing;     // names the config implies but the source lacks
  std::vector<std::string> unexpected;  // names (with reason) the config does not imply
  std::vector<std::string> mismatched;  // "name: shape [..], expected [..]" and similar
  std::vector<std::string> ignored;     // harmless extras (rotary inv_freq, tied lm_head)
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
};
TensorCheckReport compare_tensors_with_config(const ModelConfig& cfg, const TensorSource& src);
// The report as one error line (ignored tensors do not fail it).
Status check_tensors_against_config(const ModelConfig& cfg, const TensorSource& src);

}  // namespace tq
