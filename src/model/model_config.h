// ModelConfig: the geometry of a llama / qwen2 / qwen3 checkpoint, from config.json
// with mlx-lm's defaults (FORMATS.md §7.2). Mistral maps to llama.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "io/quant_config.h"

namespace tq {

enum class Family : uint8_t { kLlama, kQwen2, kQwen3 };
std::string_view family_name(Family f);  // "llama", "qwen2", "qwen3"

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
};

// Parses config.json content; `source` (the file path) prefixes every error message.
Result<ModelConfig> parse_model_config(const nlohmann::json& j, const std::string& source);
Result<ModelConfig> load_model_config(const std::string& config_json_path);

}  // namespace tq
