#include "model/tensor_table.h"

#include <algorithm>
#include <map>

#include <fmt/ranges.h>

namespace tq {

namespace {

using R = TensorRole;
constexpr std::optional<TensorRole> kNoNorm = std::nullopt;
constexpr When kAll = When::kAlways, kAttnB = When::kAttentionBias, kMlpB = When::kMlpBias,
               kUntie = When::kUntied, kIgn = When::kIgnored, kLin = When::kLinear,
               kFull = When::kFull, kMtp = When::kMtp;
constexpr ResidualSide kRd = ResidualSide::kReads, kWr = ResidualSide::kWrites,
                       kNoSd = ResidualSide::kNone;
constexpr Space kRes = Space::kResidual, kVal = Space::kHeadValue, kNo = Space::kNone;

// Shapes: [rows, cols] for matrices, [n] for vectors (V vocab, H hidden, Q heads*head_dim,
// Kv kv_heads*head_dim, I intermediate, Hd head_dim).
constexpr Dim kVH[] = {Dim::kVocab, Dim::kHidden};
constexpr Dim kQH[] = {Dim::kQDim, Dim::kHidden};
constexpr Dim kKvH[] = {Dim::kKvDim, Dim::kHidden};
constexpr Dim kHQ[] = {Dim::kHidden, Dim::kQDim};
constexpr Dim kIH[] = {Dim::kIntermediate, Dim::kHidden};
constexpr Dim kHI[] = {Dim::kHidden, Dim::kIntermediate};
constexpr Dim kH[] = {Dim::kHidden};
constexpr Dim kQ[] = {Dim::kQDim};
constexpr Dim kKv[] = {Dim::kKvDim};
constexpr Dim kI[] = {Dim::kIntermediate};
constexpr Dim kHd[] = {Dim::kHeadDim};
constexpr std::span<const Dim> kNoDims;
// qwen3_5 (G = 2·Q query + gate, C conv channels, Vd = Hv·dv, Hv value heads, Dv = dv).
constexpr Dim kGH[] = {Dim::kQGateDim, Dim::kHidden};
constexpr Dim kCH[] = {Dim::kLinConv, Dim::kHidden};
constexpr Dim kVdH[] = {Dim::kLinValue, Dim::kHidden};
constexpr Dim kHvH[] = {Dim::kLinVHeads, Dim::kHidden};
constexpr Dim kHVd[] = {Dim::kHidden, Dim::kLinValue};
constexpr Dim kConvHf[] = {Dim::kLinConv, Dim::kOne, Dim::kConvK};
constexpr Dim kConvMlx[] = {Dim::kLinConv, Dim::kConvK, Dim::kOne};
constexpr Dim kHv[] = {Dim::kLinVHeads};
constexpr Dim kDv[] = {Dim::kLinVHeadDim};
constexpr Dim kHH2[] = {Dim::kHidden, Dim::kHidden2};

// One table per family, in model order. Columns: name pattern ("{L}" = layer), role, shape,
// when present, residual side, row space, column space, norm feeding the input, quantizable.
// clang-format off
#define L "model.layers.{L}."
constexpr TensorKind kLlamaTable[] = {
  {"model.embed_tokens.weight",         R::kEmbed,       kVH,     kAll,   kWr,   kNo,  kRes, kNoNorm,       true},
  {L "input_layernorm.weight",          R::kNormAttn,    kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false},
  {L "self_attn.q_proj.weight",         R::kAttnQ,       kQH,     kAll,   kRd,   kNo,  kRes, R::kNormAttn,  true},
  {L "self_attn.q_proj.bias",           R::kAttnQBias,   kQ,      kAttnB, kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "self_attn.k_proj.weight",         R::kAttnK,       kKvH,    kAll,   kRd,   kNo,  kRes, R::kNormAttn,  true},
  {L "self_attn.k_proj.bias",           R::kAttnKBias,   kKv,     kAttnB, kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "self_attn.v_proj.weight",         R::kAttnV,       kKvH,    kAll,   kRd,   kVal, kRes, R::kNormAttn,  true},
  {L "self_attn.v_proj.bias",           R::kAttnVBias,   kKv,     kAttnB, kNoSd, kVal, kNo,  kNoNorm,       false},
  {L "self_attn.o_proj.weight",         R::kAttnO,       kHQ,     kAll,   kWr,   kRes, kVal, kNoNorm,       true},
  {L "self_attn.o_proj.bias",           R::kAttnOBias,   kH,      kAttnB, kWr,   kRes, kNo,  kNoNorm,       false},
  {L "self_attn.rotary_emb.inv_freq",   R::kRopeInvFreq, kNoDims, kIgn,   kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "post_attention_layernorm.weight", R::kNormMlp,     kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false},
  {L "mlp.gate_proj.weight",            R::kMlpGate,     kIH,     kAll,   kRd,   kNo,  kRes, R::kNormMlp,   true},
  {L "mlp.gate_proj.bias",              R::kMlpGateBias, kI,      kMlpB,  kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "mlp.up_proj.weight",              R::kMlpUp,       kIH,     kAll,   kRd,   kNo,  kRes, R::kNormMlp,   true},
  {L "mlp.up_proj.bias",                R::kMlpUpBias,   kI,      kMlpB,  kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "mlp.down_proj.weight",            R::kMlpDown,     kHI,     kAll,   kWr,   kRes, kNo,  kNoNorm,       true},
  {L "mlp.down_proj.bias",              R::kMlpDownBias, kH,      kMlpB,  kWr,   kRes, kNo,  kNoNorm,       false},
  {"model.norm.weight",                 R::kNormFinal,   kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false},
  {"lm_head.weight",                    R::kLmHead,      kVH,     kUntie, kRd,   kNo,  kRes, R::kNormFinal, true},
};

// Qwen2: q/k/v always biased; o_proj and the MLP never.
constexpr TensorKind kQwen2Table[] = {
  {"model.embed_tokens.weight",         R::kEmbed,       kVH,     kAll,   kWr,   kNo,  kRes, kNoNorm,       true},
  {L "input_layernorm.weight",          R::kNormAttn,    kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false},
  {L "self_attn.q_proj.weight",         R::kAttnQ,       kQH,     kAll,   kRd,   kNo,  kRes, R::kNormAttn,  true},
  {L "self_attn.q_proj.bias",           R::kAttnQBias,   kQ,      kAll,   kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "self_attn.k_proj.weight",         R::kAttnK,       kKvH,    kAll,   kRd,   kNo,  kRes, R::kNormAttn,  true},
  {L "self_attn.k_proj.bias",           R::kAttnKBias,   kKv,     kAll,   kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "self_attn.v_proj.weight",         R::kAttnV,       kKvH,    kAll,   kRd,   kVal, kRes, R::kNormAttn,  true},
  {L "self_attn.v_proj.bias",           R::kAttnVBias,   kKv,     kAll,   kNoSd, kVal, kNo,  kNoNorm,       false},
  {L "self_attn.o_proj.weight",         R::kAttnO,       kHQ,     kAll,   kWr,   kRes, kVal, kNoNorm,       true},
  {L "self_attn.rotary_emb.inv_freq",   R::kRopeInvFreq, kNoDims, kIgn,   kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "post_attention_layernorm.weight", R::kNormMlp,     kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false},
  {L "mlp.gate_proj.weight",            R::kMlpGate,     kIH,     kAll,   kRd,   kNo,  kRes, R::kNormMlp,   true},
  {L "mlp.up_proj.weight",              R::kMlpUp,       kIH,     kAll,   kRd,   kNo,  kRes, R::kNormMlp,   true},
  {L "mlp.down_proj.weight",            R::kMlpDown,     kHI,     kAll,   kWr,   kRes, kNo,  kNoNorm,       true},
  {"model.norm.weight",                 R::kNormFinal,   kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false},
  {"lm_head.weight",                    R::kLmHead,      kVH,     kUntie, kRd,   kNo,  kRes, R::kNormFinal, true},
};

// Qwen3: no biases; RMSNorm over head_dim on q and k (before RoPE).
constexpr TensorKind kQwen3Table[] = {
  {"model.embed_tokens.weight",         R::kEmbed,       kVH,     kAll,   kWr,   kNo,  kRes, kNoNorm,       true},
  {L "input_layernorm.weight",          R::kNormAttn,    kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false},
  {L "self_attn.q_proj.weight",         R::kAttnQ,       kQH,     kAll,   kRd,   kNo,  kRes, R::kNormAttn,  true},
  {L "self_attn.k_proj.weight",         R::kAttnK,       kKvH,    kAll,   kRd,   kNo,  kRes, R::kNormAttn,  true},
  {L "self_attn.v_proj.weight",         R::kAttnV,       kKvH,    kAll,   kRd,   kVal, kRes, R::kNormAttn,  true},
  {L "self_attn.o_proj.weight",         R::kAttnO,       kHQ,     kAll,   kWr,   kRes, kVal, kNoNorm,       true},
  {L "self_attn.q_norm.weight",         R::kQNorm,       kHd,     kAll,   kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "self_attn.k_norm.weight",         R::kKNorm,       kHd,     kAll,   kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "self_attn.rotary_emb.inv_freq",   R::kRopeInvFreq, kNoDims, kIgn,   kNoSd, kNo,  kNo,  kNoNorm,       false},
  {L "post_attention_layernorm.weight", R::kNormMlp,     kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false},
  {L "mlp.gate_proj.weight",            R::kMlpGate,     kIH,     kAll,   kRd,   kNo,  kRes, R::kNormMlp,   true},
  {L "mlp.up_proj.weight",              R::kMlpUp,       kIH,     kAll,   kRd,   kNo,  kRes, R::kNormMlp,   true},
  {L "mlp.down_proj.weight",            R::kMlpDown,     kHI,     kAll,   kWr,   kRes, kNo,  kNoNorm,       true},
  {"model.norm.weight",                 R::kNormFinal,   kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false},
  {"lm_head.weight",                    R::kLmHead,      kVH,     kUntie, kRd,   kNo,  kRes, R::kNormFinal, true},
};
#undef L

// Qwen3.5 (dense): every layer is either Gated DeltaNet (linear_attn, kLin) or gated full
// attention (self_attn, kFull); q_proj holds query and gate per head. The v/o head space is
// not a rotation space here (R2 off: the gate does not commute with a per-head rotation).
// Two layouts: mlx-lm's (what mlx-lm runs and writes) and Hugging Face's (other prefix,
// conv1d [C, 1, K], zero-centred norms except linear_attn.norm).
#define QWEN35_TABLE(P, LM_HEAD, CONV, ZC)                                                                            \
  {P "embed_tokens.weight",                            R::kEmbed,      kVH,     kAll,   kWr,   kNo,  kRes, kNoNorm,       true},        \
  {P "layers.{L}.input_layernorm.weight",              R::kNormAttn,   kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false, ZC},   \
  {P "layers.{L}.linear_attn.in_proj_qkv.weight",      R::kLinQkv,     kCH,     kLin,   kRd,   kNo,  kRes, R::kNormAttn,  true},        \
  {P "layers.{L}.linear_attn.in_proj_z.weight",        R::kLinZ,       kVdH,    kLin,   kRd,   kNo,  kRes, R::kNormAttn,  true},        \
  {P "layers.{L}.linear_attn.in_proj_b.weight",        R::kLinB,       kHvH,    kLin,   kRd,   kNo,  kRes, R::kNormAttn,  true},        \
  {P "layers.{L}.linear_attn.in_proj_a.weight",        R::kLinA,       kHvH,    kLin,   kRd,   kNo,  kRes, R::kNormAttn,  true},        \
  {P "layers.{L}.linear_attn.conv1d.weight",           R::kLinConv,    CONV,    kLin,   kNoSd, kNo,  kNo,  kNoNorm,       false},       \
  {P "layers.{L}.linear_attn.dt_bias",                 R::kLinDtBias,  kHv,     kLin,   kNoSd, kNo,  kNo,  kNoNorm,       false},       \
  {P "layers.{L}.linear_attn.A_log",                   R::kLinALog,    kHv,     kLin,   kNoSd, kNo,  kNo,  kNoNorm,       false, false, true}, \
  {P "layers.{L}.linear_attn.norm.weight",             R::kLinNorm,    kDv,     kLin,   kNoSd, kNo,  kNo,  kNoNorm,       false},       \
  {P "layers.{L}.linear_attn.out_proj.weight",         R::kLinOut,     kHVd,    kLin,   kWr,   kRes, kNo,  kNoNorm,       true},        \
  {P "layers.{L}.self_attn.q_proj.weight",             R::kAttnQ,      kGH,     kFull,  kRd,   kNo,  kRes, R::kNormAttn,  true},        \
  {P "layers.{L}.self_attn.k_proj.weight",             R::kAttnK,      kKvH,    kFull,  kRd,   kNo,  kRes, R::kNormAttn,  true},        \
  {P "layers.{L}.self_attn.v_proj.weight",             R::kAttnV,      kKvH,    kFull,  kRd,   kNo,  kRes, R::kNormAttn,  true},        \
  {P "layers.{L}.self_attn.o_proj.weight",             R::kAttnO,      kHQ,     kFull,  kWr,   kRes, kNo,  kNoNorm,       true},        \
  {P "layers.{L}.self_attn.q_norm.weight",             R::kQNorm,      kHd,     kFull,  kNoSd, kNo,  kNo,  kNoNorm,       false, ZC},   \
  {P "layers.{L}.self_attn.k_norm.weight",             R::kKNorm,      kHd,     kFull,  kNoSd, kNo,  kNo,  kNoNorm,       false, ZC},   \
  {P "layers.{L}.post_attention_layernorm.weight",     R::kNormMlp,    kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false, ZC},   \
  {P "layers.{L}.mlp.gate_proj.weight",                R::kMlpGate,    kIH,     kAll,   kRd,   kNo,  kRes, R::kNormMlp,   true},        \
  {P "layers.{L}.mlp.up_proj.weight",                  R::kMlpUp,      kIH,     kAll,   kRd,   kNo,  kRes, R::kNormMlp,   true},        \
  {P "layers.{L}.mlp.down_proj.weight",                R::kMlpDown,    kHI,     kAll,   kWr,   kRes, kNo,  kNoNorm,       true},        \
  {P "norm.weight",                                    R::kNormFinal,  kH,      kAll,   kNoSd, kRes, kNo,  kNoNorm,       false, ZC},   \
  {LM_HEAD,                                            R::kLmHead,     kVH,     kUntie, kRd,   kNo,  kRes, R::kNormFinal, true},        \
  {"mtp.pre_fc_norm_embedding.weight",                 R::kMtpNormEmb,    kH,   kMtp,   kNoSd, kRes, kNo,  kNoNorm,          false, ZC}, \
  {"mtp.pre_fc_norm_hidden.weight",                    R::kMtpNormHidden, kH,   kMtp,   kNoSd, kRes, kNo,  kNoNorm,          false, ZC}, \
  {"mtp.fc.weight",                                    R::kMtpFc,      kHH2,    kMtp,   kWr,   kRes, kRes, R::kMtpNormEmb,   true, false, false, R::kMtpNormHidden}, \
  {"mtp.layers.0.input_layernorm.weight",              R::kMtpNormAttn,   kH,   kMtp,   kNoSd, kRes, kNo,  kNoNorm,          false, ZC}, \
  {"mtp.layers.0.self_attn.q_proj.weight",             R::kMtpQ,       kGH,     kMtp,   kRd,   kNo,  kRes, R::kMtpNormAttn,  true},  \
  {"mtp.layers.0.self_attn.k_proj.weight",             R::kMtpK,       kKvH,    kMtp,   kRd,   kNo,  kRes, R::kMtpNormAttn,  true},  \
  {"mtp.layers.0.self_attn.v_proj.weight",             R::kMtpV,       kKvH,    kMtp,   kRd,   kNo,  kRes, R::kMtpNormAttn,  true},  \
  {"mtp.layers.0.self_attn.o_proj.weight",             R::kMtpO,       kHQ,     kMtp,   kWr,   kRes, kNo,  kNoNorm,          true},  \
  {"mtp.layers.0.self_attn.q_norm.weight",             R::kMtpQNorm,   kHd,     kMtp,   kNoSd, kNo,  kNo,  kNoNorm,          false, ZC}, \
  {"mtp.layers.0.self_attn.k_norm.weight",             R::kMtpKNorm,   kHd,     kMtp,   kNoSd, kNo,  kNo,  kNoNorm,          false, ZC}, \
  {"mtp.layers.0.post_attention_layernorm.weight",     R::kMtpNormMlp, kH,      kMtp,   kNoSd, kRes, kNo,  kNoNorm,          false, ZC}, \
  {"mtp.layers.0.mlp.gate_proj.weight",                R::kMtpGate,    kIH,     kMtp,   kRd,   kNo,  kRes, R::kMtpNormMlp,   true},  \
  {"mtp.layers.0.mlp.up_proj.weight",                  R::kMtpUp,      kIH,     kMtp,   kRd,   kNo,  kRes, R::kMtpNormMlp,   true},  \
  {"mtp.layers.0.mlp.down_proj.weight",                R::kMtpDown,    kHI,     kMtp,   kWr,   kRes, kNo,  kNoNorm,          true},  \
  {"mtp.norm.weight",                                  R::kMtpNormFinal, kH,    kMtp,   kNoSd, kRes, kNo,  kNoNorm,          false, ZC, false, std::nullopt, true},
constexpr TensorKind kQwen35MlxTable[] = {
  QWEN35_TABLE("language_model.model.", "language_model.lm_head.weight", kConvMlx, false)
};
constexpr TensorKind kQwen35HfTable[] = {
  QWEN35_TABLE("model.language_model.", "lm_head.weight", kConvHf, true)
};
#undef QWEN35_TABLE
// clang-format on

// Tensors a qwen3_5 Hugging Face checkpoint carries that no pass reads: the vision tower, and an
// MTP head we cannot read (no mtp.fc.weight, or more than one layer). mlx-lm drops both at load.
constexpr std::string_view kQwen35Ignored[] = {"mtp.", "model.visual.", "visual.", "vision_tower."};

bool row_present(const TensorKind& k, const ModelConfig& c, int64_t layer) {
  switch (k.when) {
    case When::kLinear:
      return layer >= 0 && c.linear_layer(layer);
    case When::kFull:
      return layer >= 0 && !c.linear_layer(layer);
    case When::kAlways:
      return true;
    case When::kAttentionBias:
      return c.attention_bias;
    case When::kMlpBias:
      return c.mlp_bias;
    case When::kUntied:
      return !c.tie_word_embeddings;
    case When::kIgnored:
      return false;
    case When::kMtp:
      return c.has_mtp && layer < 0;
  }
  return false;
}

int64_t dim_value(Dim d, const ModelConfig& c) {
  switch (d) {
    case Dim::kHidden:
      return c.hidden_size;
    case Dim::kVocab:
      return c.vocab_size;
    case Dim::kIntermediate:
      return c.intermediate_size;
    case Dim::kHeadDim:
      return c.head_dim;
    case Dim::kQDim:
      return c.num_attention_heads * c.head_dim;
    case Dim::kKvDim:
      return c.num_key_value_heads * c.head_dim;
    case Dim::kQGateDim:
      return 2 * c.num_attention_heads * c.head_dim;
    case Dim::kLinConv:
      return c.linear_conv_dim();
    case Dim::kLinValue:
      return c.linear_value_dim();
    case Dim::kLinVHeads:
      return c.linear_num_value_heads;
    case Dim::kLinVHeadDim:
      return c.linear_value_head_dim;
    case Dim::kConvK:
      return c.linear_conv_kernel_dim;
    case Dim::kOne:
      return 1;
    case Dim::kHidden2:
      return 2 * c.hidden_size;
  }
  return 0;
}

std::string list_some(const std::vector<std::string>& v) {
  constexpr size_t kShow = 3;
  std::vector<std::string> head(v.begin(), v.begin() + std::min(v.size(), kShow));
  return fmt::format("{}{}", fmt::join(head, "; "), v.size() > kShow ? "; ..." : "");
}

}  // namespace

std::string_view tensor_role_name(TensorRole r) {
  static constexpr std::string_view kNames[] = {
      "embed",          "attn_q",        "attn_k",       "attn_v",          "attn_o",
      "mlp_gate",       "mlp_up",        "mlp_down",     "norm_attn",       "norm_mlp",
      "norm_final",     "lm_head",       "q_norm",       "k_norm",          "attn_q_bias",
      "attn_k_bias",    "attn_v_bias",   "attn_o_bias",  "mlp_gate_bias",   "mlp_up_bias",
      "mlp_down_bias",  "rope_inv_freq", "lin_qkv",      "lin_z",           "lin_b",
      "lin_a",          "lin_conv",      "lin_dt_bias",  "lin_a_log",       "lin_norm",
      "lin_out",        "mtp_fc",        "mtp_norm_emb", "mtp_norm_hidden", "mtp_norm_attn",
      "mtp_q",          "mtp_k",         "mtp_v",        "mtp_o",           "mtp_q_norm",
      "mtp_k_norm",     "mtp_norm_mlp",  "mtp_gate",     "mtp_up",          "mtp_down",
      "mtp_norm_final",
  };
  static_assert(std::size(kNames) == static_cast<size_t>(kLastTensorRole) + 1);
  return kNames[static_cast<size_t>(r)];
}

std::span<const TensorKind> family_table(Family f) {
  switch (f) {
    case Family::kLlama:
      return kLlamaTable;
    case Family::kQwen2:
      return kQwen2Table;
    case Family::kQwen3:
      return kQwen3Table;
    case Family::kQwen35:
      return kQwen35MlxTable;
  }
  return {};
}

std::span<const TensorKind> table_for(const ModelConfig& cfg) {
  if (cfg.family == Family::kQwen35 && cfg.hf_layout) return kQwen35HfTable;
  return family_table(cfg.family);
}

bool tensor_present(const TensorKind& k, const ModelConfig& cfg, int64_t layer) {
  return row_present(k, cfg, layer);
}

std::string_view r2_off_reason(Family f) {
  if (f == Family::kQwen35)
    return "the attention output gate multiplies each head's output elementwise and does not "
           "commute with a per-head rotation";
  return {};
}

std::string tensor_name(const TensorKind& k, int64_t layer) {
  std::string s(k.pattern);
  if (auto p = s.find("{L}"); p != std::string::npos) s.replace(p, 3, std::to_string(layer));
  return s;
}

const TensorKind* same_tensor(std::span<const TensorKind> table, const TensorKind& k) {
  for (const TensorKind& r : table)
    if (r.role == k.role && r.per_layer() == k.per_layer()) return &r;
  return nullptr;
}

Status change_layout(const TensorKind& from, const TensorKind& to, const Shape& to_shape,
                     FloatTensor& t) {
  if (shape_numel(t.shape) != shape_numel(to_shape))
    return err("'{}': shape {} cannot be stored as {}", from.pattern, shape_str(t.shape),
               shape_str(to_shape));
  t.shape = to_shape;
  if (from.zero_centred != to.zero_centred)
    for (float& w : t.data) w += from.zero_centred ? 1.0f : -1.0f;
  return ok_status();
}

Shape tensor_shape(const TensorKind& k, const ModelConfig& cfg) {
  Shape s;
  for (Dim d : k.dims) s.push_back(dim_value(d, cfg));
  return s;
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg) {
  std::span<const TensorKind> table = table_for(cfg);
  std::vector<TensorSpec> out;
  auto emit = [&](const TensorKind& k, int64_t layer) {
    if (row_present(k, cfg, layer))
      out.push_back({tensor_name(k, layer), tensor_shape(k, cfg), &k, layer});
  };
  // Globals before the first per-layer row, then layer by layer, then the remaining globals.
  auto first_layer =
      std::find_if(table.begin(), table.end(), [](const TensorKind& k) { return k.per_layer(); });
  for (auto it = table.begin(); it != first_layer; ++it) emit(*it, -1);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    for (const auto& k : table)
      if (k.per_layer()) emit(k, l);
  for (auto it = first_layer; it != table.end(); ++it)
    if (!it->per_layer()) emit(*it, -1);
  return out;
}

std::optional<ClassifiedTensor> classify(std::string_view name, Family f) {
  return classify(name, family_table(f));
}

std::optional<ClassifiedTensor> classify(std::string_view name, std::span<const TensorKind> table) {
  for (const auto& k : table) {
    size_t p = k.pattern.find("{L}");
    if (p == std::string_view::npos) {
      if (name == k.pattern) return ClassifiedTensor{&k, -1};
      continue;
    }
    std::string_view pre = k.pattern.substr(0, p), post = k.pattern.substr(p + 3);
    if (name.size() <= pre.size() + post.size() || name.substr(0, pre.size()) != pre ||
        name.substr(name.size() - post.size()) != post)
      continue;
    std::string_view digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
    if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) continue;
    int64_t layer = 0;
    bool all_digits = true;
    for (char ch : digits) {
      if (ch < '0' || ch > '9') all_digits = false;
      layer = layer * 10 + (ch - '0');
    }
    if (all_digits) return ClassifiedTensor{&k, layer};
  }
  return std::nullopt;
}

TensorCheckReport compare_tensors_with_config(const ModelConfig& cfg, const TensorSource& src) {
  TensorCheckReport rep;
  std::map<std::string, const TensorSpec*> expected;
  std::vector<TensorSpec> specs = expected_tensors(cfg);
  for (const auto& s : specs) expected.emplace(s.name, &s);
  for (const TensorInfo& t : src.tensors()) {
    auto it = expected.find(t.name);
    if (it == expected.end()) {
      auto c = classify(t.name, table_for(cfg));
      const bool family_ignores =
          cfg.family == Family::kQwen35 &&
          std::any_of(std::begin(kQwen35Ignored), std::end(kQwen35Ignored),
                      [&](std::string_view p) { return t.name.starts_with(p); });
      if (family_ignores) {
        rep.ignored.push_back(t.name);
      } else if (c && c->kind->when == When::kIgnored) {
        rep.ignored.push_back(t.name);
      } else if (c && c->kind->when == When::kUntied && cfg.tie_word_embeddings) {
        if (t.mlx_quant)  // sanitize drops only lm_head.weight: scales/biases break the load
          rep.unexpected.push_back(t.name + " (quantized lm_head with tied embeddings)");
        else
          rep.ignored.push_back(t.name + " (tied embeddings)");
      } else if (c && c->layer >= cfg.num_hidden_layers) {
        rep.unexpected.push_back(fmt::format("{} (layer {} >= num_hidden_layers {})", t.name,
                                             c->layer, cfg.num_hidden_layers));
      } else {
        rep.unexpected.push_back(t.name);
      }
      continue;
    }
    const TensorSpec& s = *it->second;
    if (t.shape != s.shape)
      rep.mismatched.push_back(
          fmt::format("{}: shape {}, expected {}", t.name, shape_str(t.shape), shape_str(s.shape)));
    else if (t.mlx_quant && !s.kind->quantizable)
      rep.mismatched.push_back(fmt::format("{}: stored quantized but a {} is never quantized",
                                           t.name, tensor_role_name(s.kind->role)));
    expected.erase(it);
  }
  for (const auto& s : specs)
    if (expected.count(s.name)) rep.missing.push_back(s.name);
  return rep;
}

Status check_tensors_against_config(const ModelConfig& cfg, const TensorSource& src) {
  TensorCheckReport r = compare_tensors_with_config(cfg, src);
  if (r.ok()) return ok_status();
  std::vector<std::string> parts;
  if (!r.missing.empty())
    parts.push_back(fmt::format("{} missing ({})", r.missing.size(), list_some(r.missing)));
  if (!r.unexpected.empty())
    parts.push_back(
        fmt::format("{} unexpected ({})", r.unexpected.size(), list_some(r.unexpected)));
  if (!r.mismatched.empty())
    parts.push_back(
        fmt::format("{} mismatched ({})", r.mismatched.size(), list_some(r.mismatched)));
  return err("{}: tensors do not match the {} config: {}", src.path(), family_name(cfg.family),
             fmt::join(parts, ", "));
}

}  // namespace tq
