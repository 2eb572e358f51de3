// ModelConfig: the geometry of a llama / qwen2 / qwen3 / qwen3_5 checkpoint, from config.json
// with mlx-lm's defaults (FORMATS.md §7.2, docs/QWEN35.md). Mistral maps to llama.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "io/quant_config.h"

namespace tq {

// kQwen35: the dense Qwen3.5 hybrid (Gated DeltaNet layers and gated full-attention layers).
enum class Family : uint8_t { kLlama, kQwen2, kQwen3, kQwen35 };
std::string_view family_name(Family f);  // "llama", "qwen2", "qwen3", "qwen3_5"

struct RopeScaling {
  std::string type = "default";  // "default", "linear", "llama3", ...
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Family family = Family::kLlama;
  std::string model_type;  // as written ("llama", "mistral", "qwen2", "qwen3")
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t intermediate_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool rope_traditional = false;
  std::optional<RopeScaling> rope_scaling;
  bool tie_word_embeddings = true;
  bool attention_bias = false;  // qwen2: always true (q/k/v)
  bool mlp_bias = false;
  std::string torch_dtype;  // "bfloat16", "float16", "float32", or empty
  std::optional<QuantizationConfig> quantization;

  // qwen3_5 only (docs/QWEN35.md). RoPE turns the first rope_dims of each head (0: all of it).
  int64_t rope_dims = 0;
  int64_t linear_num_key_heads = 0;    // Hk
  int64_t linear_num_value_heads = 0;  // Hv, a multiple of Hk
  int64_t linear_key_head_dim = 0;     // dk
  int64_t linear_value_head_dim = 0;   // dv
  int64_t linear_conv_kernel_dim = 0;  // K
  int64_t full_attention_interval = 0;
  // Hugging Face layout (model.language_model.*, conv1d [C, 1, K], norms stored zero-centred
  // and applied as 1 + w) rather than mlx-lm's sanitized one; set from the tensor names.
  bool hf_layout = false;
  // qwen3_5: the checkpoint carries a multi-token-prediction head (mtp.fc.weight and one
  // mtp.layers.0 decoder layer); set from the tensor names. Converted as a companion.
  bool has_mtp = false;

  int64_t rotary_dims() const { return rope_dims > 0 ? rope_dims : head_dim; }
  // A Gated DeltaNet layer (qwen3_5: all but every full_attention_interval-th).
  bool linear_layer(int64_t l) const {
    return family == Family::kQwen35 && (l + 1) % full_attention_interval != 0;
  }
  // The gated attention of qwen3_5: q_proj also yields a sigmoid gate per head.
  bool attn_output_gate() const { return family == Family::kQwen35; }
  int64_t linear_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int64_t linear_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int64_t linear_conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }
};

// Parses config.json content; `source` (the file path) prefixes every error message.
Result<ModelConfig> parse_model_config(const nlohmann::json& j, const std::string& source);
Result<ModelConfig> load_model_config(const std::string& config_json_path);

}  // namespace tq
