#include "io/quant_config.h"

#include "io/json_parse.h"

namespace tq {

namespace {

Result<int> get_small_int(const nlohmann::json& j, const std::string& where,
                          const std::string& source) {
  if (!j.is_number_integer() && !j.is_number_unsigned())
    return err("{}: {} must be an integer, got {}", source, where, json_type_name(j));
  // Parsed text gives unsigned for n >= 0; values built in C++ may be signed.
  bool in_range = j.is_number_unsigned() ? j.get<uint64_t>() <= 1024
                                         : j.get<int64_t>() >= 0 && j.get<int64_t>() <= 1024;
  if (!in_range) return err("{}: {} = {} is out of range", source, where, j.dump());
  return static_cast<int>(j.get<int64_t>());
}

Result<QuantMode> get_mode(const nlohmann::json& j, const std::string& where,
                           const std::string& source) {
  if (!j.is_string())
    return err("{}: {} must be a string, got {}", source, where, json_type_name(j));
  auto m = quant_mode_from_name(j.get_ref<const std::string&>());
  if (!m)
    return err("{}: {} '{}' is not one of affine, mxfp4, nvfp4, mxfp8", source, where,
               printable(j.get_ref<const std::string&>()));
  return *m;
}

// A per-module dict: missing mode means affine (not the global mode), missing bits/group_size
// take that mode's defaults, exactly as mlx-lm's to_quantized(**dict).
Result<QuantSpec> parse_module_spec(const nlohmann::json& d, const std::string& where,
                                    const std::string& source) {
  QuantMode mode = QuantMode::kAffine;
  if (auto it = d.find("mode"); it != d.end()) {
    TQ_TRY(mode, get_mode(*it, where + ".mode", source));
  }
  QuantSpec s = default_spec_for_mode(mode);
  for (const auto& [k, v] : d.items()) {
    // null is None in to_quantized(**dict): the mode's default (mlx-lm's mixed_* presets write
    // "group_size": null when --q-group-size is not given).
    if (v.is_null() && (k == "bits" || k == "group_size")) continue;
    if (k == "bits") {
      TQ_TRY(s.bits, get_small_int(v, where + ".bits", source));
    } else if (k == "group_size") {
      TQ_TRY(s.group_size, get_small_int(v, where + ".group_size", source));
    } else if (k != "mode" && k != "quantize_input") {
      return err("{}: {} has unknown key '{}' (mlx-lm accepts group_size, bits, mode)", source,
                 where, printable(k));
    }
  }
  Status st = validate_quant_spec(s);
  if (!st.ok()) return err("{}: {}: {}", source, where, st.error().message);
  return s;
}

}  // namespace

std::optional<QuantSpec> QuantizationConfig::spec_for(const std::string& module_path) const {
  auto it = modules.find(module_path);
  if (it != modules.end()) return it->second;
  return global;
}

Result<std::optional<QuantizationConfig>> parse_quantization_config(const nlohmann::json& config,
                                                                    const std::string& source) {
  if (!config.is_object()) return err("{}: config is not a JSON object", source);
  const nlohmann::json* q = nullptr;
  std::string key = "quantization";
  if (auto it = config.find("quantization"); it != config.end() && !it->is_null()) {
    q = &*it;
  } else if (auto jt = config.find("quantization_config"); jt != config.end() && !jt->is_null()) {
    if (jt->is_object() && jt->contains("quant_method")) {
      const auto& m = (*jt)["quant_method"];
      return err(
          "{}: quantization_config.quant_method {} is not supported (only MLX "
          "`quantization` blocks are)",
          source, m.dump());
    }
    q = &*jt;
    key = "quantization_config";
  }
  if (q == nullptr) return std::optional<QuantizationConfig>();
  if (!q->is_object())
    return err("{}: {} must be an object, got {}", source, key, json_type_name(*q));

  QuantizationConfig qc;
  QuantMode mode = QuantMode::kAffine;
  if (auto it = q->find("mode"); it != q->end()) {
    TQ_TRY(mode, get_mode(*it, key + ".mode", source));
  }
  auto gs = q->find("group_size");
  auto bits = q->find("bits");
  if (gs == q->end()) return err("{}: {} is missing 'group_size'", source, key);
  if (bits == q->end()) return err("{}: {} is missing 'bits'", source, key);
  qc.global = default_spec_for_mode(mode);  // null bits/group_size: the mode's defaults
  if (!gs->is_null()) {
    TQ_TRY(qc.global.group_size, get_small_int(*gs, key + ".group_size", source));
  }
  if (!bits->is_null()) {
    TQ_TRY(qc.global.bits, get_small_int(*bits, key + ".bits", source));
  }
  Status st = validate_quant_spec(qc.global);
  if (!st.ok()) return err("{}: {}: {}", source, key, st.error().message);

  for (const auto& [k, v] : q->items()) {
    std::string where = fmt::format("{}[\"{}\"]", key, printable(k));
    if (v.is_object()) {
      TQ_TRY(QuantSpec s, parse_module_spec(v, where, source));
      qc.modules[k] = s;
    } else if (v.is_boolean()) {
      qc.modules[k] = v.get<bool>() ? std::optional<QuantSpec>(qc.global) : std::nullopt;
    }
    // Other scalars (group_size, bits, mode, quant_method, ...) are not module paths.
  }
  return std::optional<QuantizationConfig>(std::move(qc));
}

}  // namespace tq
