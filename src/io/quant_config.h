// The `quantization` block of an MLX config.json (FORMATS.md §4.1-4.2): global spec plus
// per-module overrides. Lives in io because reading a quantized directory needs it.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "formats/quant_spec.h"

namespace tq {

struct QuantizationConfig {
  QuantSpec global;
  // Per-module overrides: a spec, or nullopt for an explicit `false` (module kept float).
  // An explicit `true` is stored as the global spec.
  std::map<std::string, std::optional<QuantSpec>> modules;
  // The spec that applies to module path `p` when its "<p>.scales" exists.
  std::optional<QuantSpec> spec_for(const std::string& module_path) const;
};

// Reads `quantization` from a whole config.json object; falls back to `quantization_config`
// only when that has no `quant_method` (HF quantizers such as gptq/awq are not MLX layouts).
// Returns nullopt when the config has neither. `source` prefixes every error.
Result<std::optional<QuantizationConfig>> parse_quantization_config(const nlohmann::json& config,
                                                                    const std::string& source);

}  // namespace tq
