// config.json -> ModelConfig with the defaults of mlx-lm's llama/qwen2/qwen3 ModelArgs.
#include "model/model_config.h"

#include <array>
#include <cmath>

#include "io/json_parse.h"

namespace tq {

std::string_view family_name(Family f) {
  switch (f) {
    case Family::kLlama:
      return "llama";
    case Family::kQwen2:
      return "qwen2";
    case Family::kQwen3:
      return "qwen3";
    case Family::kQwen35:
      return "qwen3_5";
  }
  return "?";
}

namespace {

using json = nlohmann::json;
constexpr int64_t kMaxDim = int64_t{1} << 24;  // keeps products of two sizes far from overflow
constexpr int64_t kMaxLayers = 4096;

// Typed accessors: an absent key or a JSON null reads as "not given"; a wrong type is an error.
class Reader {
 public:
  Reader(const json& j, const std::string& source, std::string prefix = "")
      : j_(j), src_(source), prefix_(std::move(prefix)) {}

  const json* get(const char* key) const {
    auto it = j_.find(key);
    return (it == j_.end() || it->is_null()) ? nullptr : &*it;
  }
  std::string name(const char* key) const { return prefix_ + key; }

  Result<std::optional<int64_t>> opt_int(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<int64_t>();
    if (v->is_number_unsigned() && v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX))
      return std::optional<int64_t>(static_cast<int64_t>(v->get<uint64_t>()));
    if (v->is_number_integer() && !v->is_number_unsigned())
      return std::optional<int64_t>(v->get<int64_t>());
    return err("{}: '{}' must be an integer, got {}", src_, name(key), json_type_name(*v));
  }
  Result<std::optional<double>> opt_num(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<double>();
    if (!v->is_number())
      return err("{}: '{}' must be a number, got {}", src_, name(key), json_type_name(*v));
    return std::optional<double>(v->get<double>());
  }
  Result<std::optional<bool>> opt_bool(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<bool>();
    if (!v->is_boolean())
      return err("{}: '{}' must be true or false, got {}", src_, name(key), json_type_name(*v));
    return std::optional<bool>(v->get<bool>());
  }
  Result<std::optional<std::string>> opt_str(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<std::string>();
    if (!v->is_string())
      return err("{}: '{}' must be a string, got {}", src_, name(key), json_type_name(*v));
    return std::optional<std::string>(v->get<std::string>());
  }
  template <typename T>
  Result<T> required(Result<std::optional<T>> r, const char* key) const {
    if (!r.ok()) return r.error();
    if (!r.value()) return err("{}: missing required key '{}'", src_, name(key));
    return *r.value();
  }
  Result<int64_t> req_int(const char* key) const { return required(opt_int(key), key); }
  Result<double> req_num(const char* key) const { return required(opt_num(key), key); }
  Result<bool> req_bool(const char* key) const { return required(opt_bool(key), key); }

 private:
  const json& j_;
  const std::string& src_;
  std::string prefix_;
};

bool known_rope_type(const std::string& t) {
  static const std::array<std::string_view, 8> kTypes = {
      "default", "linear", "llama3", "dynamic", "yarn", "longrope", "proportional", "mrope"};
  for (auto k : kTypes)
    if (k == t) return true;
  return false;
}

// A rope_scaling (or rope_parameters) object; nullopt for the "default" type.
Result<std::optional<RopeScaling>> parse_rope_scaling(const json& o, const std::string& source,
                                                      const std::string& key) {
  if (!o.is_object())
    return err("{}: '{}' must be an object, got {}", source, key, json_type_name(o));
  Reader r(o, source, key + ".");
  TQ_TRY(auto type, r.opt_str("type"));
  if (!type) {
    TQ_TRY(type, r.opt_str("rope_type"));
  }
  RopeScaling rs;
  rs.type = type.value_or("default");
  if (!known_rope_type(rs.type))
    return err("{}: unsupported {} type '{}'", source, key, printable(rs.type));
  if (rs.type == "default") return std::optional<RopeScaling>();
  TQ_TRY(auto factor, r.opt_num("factor"));
  if (!factor && (rs.type == "linear" || rs.type == "llama3"))
    return err("{}: missing required key '{}.factor'", source, key);
  rs.factor = factor.value_or(1.0);
  TQ_TRY(auto lo, r.opt_num("low_freq_factor"));
  TQ_TRY(auto hi, r.opt_num("high_freq_factor"));
  TQ_TRY(auto old, r.opt_int("original_max_position_embeddings"));
  rs.low_freq_factor = lo.value_or(1.0);
  rs.high_freq_factor = hi.value_or(4.0);
  rs.original_max_position_embeddings = old.value_or(8192);
  if (!(rs.factor > 0) || !std::isfinite(rs.factor))
    return err("{}: '{}.factor' must be positive", source, key);
  if (rs.type == "llama3" &&
      (!(rs.high_freq_factor > rs.low_freq_factor) || !(rs.low_freq_factor > 0) ||
       rs.original_max_position_embeddings <= 0))
    return err(
        "{}: '{}' llama3 needs 0 < low_freq_factor < high_freq_factor and a positive "
        "original_max_position_embeddings",
        source, key);
  return std::optional<RopeScaling>(rs);
}

Status check_size(const std::string& source, const char* key, int64_t v, int64_t max = kMaxDim) {
  if (v <= 0 || v > max) return err("{}: '{}' = {} is out of range", source, key, v);
  return ok_status();
}

// qwen3_5 as mlx-lm's qwen3_5.py reads it (docs/QWEN35.md): only text_config when there is one,
// RoPE from rope_parameters alone. What the runtime cannot run is refused naming the field.
Result<ModelConfig> parse_qwen35_config(const json& top, const std::string& source) {
  ModelConfig c;
  c.family = Family::kQwen35;
  c.model_type = "qwen3_5";
  const json* tc = Reader(top, source).get("text_config");
  if (tc && !tc->is_object())
    return err("{}: 'text_config' must be an object, got {}", source, json_type_name(*tc));
  const json& j = tc ? *tc : top;
  Reader r(j, source, tc ? "text_config." : "");
  auto need = [&](const char* key, int64_t& dst, int64_t max = kMaxDim) -> Status {
    TQ_TRY(dst, r.req_int(key));
    if (dst <= 0 || dst > max)
      return err("{}: '{}' = {} is out of range", source, r.name(key), dst);
    return ok_status();
  };
  auto opt = [&](const char* key, int64_t& dst, int64_t dflt) -> Status {
    TQ_TRY(auto v, r.opt_int(key));
    dst = v.value_or(dflt);
    if (dst <= 0 || dst > kMaxDim)
      return err("{}: '{}' = {} is out of range", source, r.name(key), dst);
    return ok_status();
  };
  TQ_CHECK_OK(need("hidden_size", c.hidden_size));
  TQ_CHECK_OK(need("num_hidden_layers", c.num_hidden_layers, kMaxLayers));
  TQ_CHECK_OK(need("intermediate_size", c.intermediate_size));
  TQ_CHECK_OK(need("num_attention_heads", c.num_attention_heads));
  TQ_CHECK_OK(need("num_key_value_heads", c.num_key_value_heads));
  TQ_CHECK_OK(need("vocab_size", c.vocab_size));
  TQ_CHECK_OK(need("linear_num_key_heads", c.linear_num_key_heads));
  TQ_CHECK_OK(need("linear_num_value_heads", c.linear_num_value_heads));
  TQ_CHECK_OK(need("linear_key_head_dim", c.linear_key_head_dim));
  TQ_CHECK_OK(need("linear_value_head_dim", c.linear_value_head_dim));
  TQ_CHECK_OK(opt("linear_conv_kernel_dim", c.linear_conv_kernel_dim, 4));
  TQ_CHECK_OK(opt("full_attention_interval", c.full_attention_interval, 4));
  TQ_CHECK_OK(opt("head_dim", c.head_dim, c.hidden_size / c.num_attention_heads));
  TQ_CHECK_OK(opt("max_position_embeddings", c.max_position_embeddings, 131072));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return err("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source,
               c.num_attention_heads, c.num_key_value_heads);
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    return err("{}: '{}' {} is not a multiple of linear_num_key_heads {}", source,
               r.name("linear_num_value_heads"), c.linear_num_value_heads, c.linear_num_key_heads);
  TQ_TRY(auto eps, r.opt_num("rms_norm_eps"));
  c.rms_norm_eps = eps.value_or(1e-6);
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    return err("{}: '{}' must be positive", source, r.name("rms_norm_eps"));
  TQ_TRY(auto tie, r.opt_bool("tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(false);
  TQ_TRY(auto bias, r.opt_bool("attention_bias"));
  if (bias.value_or(false))
    return err("{}: '{}' is true: qwen3_5 with attention biases is not supported", source,
               r.name("attention_bias"));
  TQ_TRY(auto experts, r.opt_int("num_experts"));
  if (experts.value_or(0) > 0)
    return err("{}: '{}' = {}: the qwen3_5 mixture of experts is not supported yet", source,
               r.name("num_experts"), *experts);

  // rope_parameters absent: mlx-lm's default (theta 1e5, factor 0.25); null or empty: the
  // top-level rope_theta / partial_rotary_factor; an object: its own keys.
  double theta = 1e5, factor = 0.25;
  const auto rp = j.find("rope_parameters");
  const bool rp_given = rp != j.end() && !rp->is_null() && !(rp->is_object() && rp->empty());
  if (rp_given) {
    if (!rp->is_object())
      return err("{}: '{}' must be an object, got {}", source, r.name("rope_parameters"),
                 json_type_name(*rp));
    Reader p(*rp, source, r.name("rope_parameters") + ".");
    TQ_TRY(auto type, p.opt_str("type"));
    if (!type) {
      TQ_TRY(type, p.opt_str("rope_type"));
    }
    if (type && *type != "default" && *type != "mrope")
      return err("{}: '{}' '{}' is not supported for qwen3_5 (default, mrope)", source,
                 p.name("type"), printable(*type));
    TQ_TRY(auto t, p.opt_num("rope_theta"));
    TQ_TRY(auto f, p.opt_num("partial_rotary_factor"));
    theta = t.value_or(theta), factor = f.value_or(factor);
  } else if (rp != j.end()) {
    TQ_TRY(auto t, r.opt_num("rope_theta"));
    TQ_TRY(auto f, r.opt_num("partial_rotary_factor"));
    theta = t.value_or(theta), factor = f.value_or(factor);
  }
  c.rope_theta = theta;
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    return err("{}: 'rope_theta' must be positive", source);
  if (!(factor > 0 && factor <= 1))
    return err("{}: 'partial_rotary_factor' {} is not in (0, 1]", source, factor);
  c.rope_dims = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
  if (c.rope_dims <= 0 || c.rope_dims % 2 != 0)
    return err(
        "{}: rotary dims head_dim {} x partial_rotary_factor {} = {} is not a positive "
        "even number",
        source, c.head_dim, factor, c.rope_dims);

  TQ_TRY(auto td, Reader(top, source).opt_str("torch_dtype"));
  if (!td) {
    TQ_TRY(td, r.opt_str("torch_dtype"));
  }
  if (!td) {
    TQ_TRY(td, r.opt_str("dtype"));
  }
  c.torch_dtype = td.value_or("");
  TQ_TRY(c.quantization, parse_quantization_config(top, source));
  return c;
}

}  // namespace

Result<ModelConfig> parse_model_config(const json& j, const std::string& source) {
  if (!j.is_object()) return err("{}: config is not a JSON object", source);
  Reader r(j, source);
  ModelConfig c;
  TQ_TRY(auto mt, r.opt_str("model_type"));
  if (!mt) return err("{}: missing required key 'model_type'", source);
  c.model_type = *mt;
  if (c.model_type == "llama" || c.model_type == "mistral") {
    c.family = Family::kLlama;
  } else if (c.model_type == "qwen2") {
    c.family = Family::kQwen2;
  } else if (c.model_type == "qwen3") {
    c.family = Family::kQwen3;
  } else if (c.model_type == "qwen3_5") {
    return parse_qwen35_config(j, source);
  } else {
    return err("{}: unsupported model_type '{}' (supported: llama, mistral, qwen2, qwen3, qwen3_5)",
               source, printable(c.model_type));
  }
  const bool llama = c.family == Family::kLlama;
  const bool qwen2 = c.family == Family::kQwen2;
  const bool qwen3 = c.family == Family::kQwen3;

  TQ_TRY(c.hidden_size, r.req_int("hidden_size"));
  TQ_TRY(c.num_hidden_layers, r.req_int("num_hidden_layers"));
  TQ_TRY(c.intermediate_size, r.req_int("intermediate_size"));
  TQ_TRY(c.num_attention_heads, r.req_int("num_attention_heads"));
  TQ_TRY(c.rms_norm_eps, r.req_num("rms_norm_eps"));
  TQ_TRY(c.vocab_size, r.req_int("vocab_size"));
  if (llama) {
    TQ_TRY(auto kv, r.opt_int("num_key_value_heads"));
    c.num_key_value_heads = kv.value_or(c.num_attention_heads);
  } else {
    TQ_TRY(c.num_key_value_heads, r.req_int("num_key_value_heads"));
  }
  TQ_CHECK_OK(check_size(source, "hidden_size", c.hidden_size));
  TQ_CHECK_OK(check_size(source, "num_hidden_layers", c.num_hidden_layers, kMaxLayers));
  TQ_CHECK_OK(check_size(source, "intermediate_size", c.intermediate_size));
  TQ_CHECK_OK(check_size(source, "num_attention_heads", c.num_attention_heads));
  TQ_CHECK_OK(check_size(source, "num_key_value_heads", c.num_key_value_heads));
  TQ_CHECK_OK(check_size(source, "vocab_size", c.vocab_size));

  if (qwen3) {
    TQ_TRY(c.head_dim, r.req_int("head_dim"));
  } else {
    std::optional<int64_t> hd;
    if (llama) {
      TQ_TRY(hd, r.opt_int("head_dim"));  // qwen2 ignores head_dim: always hidden / heads
    }
    if (hd) {
      c.head_dim = *hd;
    } else {
      if (c.hidden_size % c.num_attention_heads != 0)
        return err("{}: hidden_size {} is not divisible by num_attention_heads {}", source,
                   c.hidden_size, c.num_attention_heads);
      c.head_dim = c.hidden_size / c.num_attention_heads;
    }
  }
  TQ_CHECK_OK(check_size(source, "head_dim", c.head_dim));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return err("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source,
               c.num_attention_heads, c.num_key_value_heads);
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    return err("{}: 'rms_norm_eps' must be positive", source);

  TQ_TRY(auto mpe, r.opt_int("max_position_embeddings"));
  if (qwen3 && !mpe) return err("{}: missing required key 'max_position_embeddings'", source);
  c.max_position_embeddings = mpe.value_or(qwen2 ? 32768 : 0);
  if (c.max_position_embeddings < 0)
    return err("{}: 'max_position_embeddings' must not be negative", source);

  // rope_parameters (newer transformers) is only a fallback for rope_theta / rope_scaling.
  const json* rope_params = r.get("rope_parameters");
  if (rope_params && !rope_params->is_object())
    return err("{}: 'rope_parameters' must be an object, got {}", source,
               json_type_name(*rope_params));
  TQ_TRY(auto theta, r.opt_num("rope_theta"));
  if (!theta && rope_params) {
    TQ_TRY(theta, Reader(*rope_params, source, "rope_parameters.").opt_num("rope_theta"));
  }
  if (qwen3 && !theta) return err("{}: missing required key 'rope_theta'", source);
  c.rope_theta = theta.value_or(qwen2 ? 1e6 : 10000.0);
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    return err("{}: 'rope_theta' must be positive", source);
  if (const json* rs = r.get("rope_scaling")) {
    TQ_TRY(c.rope_scaling, parse_rope_scaling(*rs, source, "rope_scaling"));
  } else if (rope_params) {
    TQ_TRY(c.rope_scaling, parse_rope_scaling(*rope_params, source, "rope_parameters"));
  }
  if (!qwen3) {
    TQ_TRY(auto trad, r.opt_bool("rope_traditional"));
    c.rope_traditional = trad.value_or(false);
  }

  if (qwen3) {
    TQ_TRY(c.tie_word_embeddings, r.req_bool("tie_word_embeddings"));
  } else {
    TQ_TRY(auto tie, r.opt_bool("tie_word_embeddings"));
    c.tie_word_embeddings = tie.value_or(true);  // mlx-lm's default (HF llama's is false)
  }
  if (llama) {
    TQ_TRY(auto ab, r.opt_bool("attention_bias"));
    TQ_TRY(auto mb, r.opt_bool("mlp_bias"));
    c.attention_bias = ab.value_or(false);
    c.mlp_bias = mb.value_or(false);
  } else {
    c.attention_bias = qwen2;  // qwen2: q/k/v always biased; qwen3: never
    c.mlp_bias = false;
  }

  TQ_TRY(auto td, r.opt_str("torch_dtype"));
  if (!td) {
    TQ_TRY(td, r.opt_str("dtype"));  // newer transformers' spelling
  }
  c.torch_dtype = td.value_or("");
  TQ_TRY(c.quantization, parse_quantization_config(j, source));
  return c;
}

Result<ModelConfig> load_model_config(const std::string& config_json_path) {
  TQ_TRY(json j, read_json_file(config_json_path));
  return parse_model_config(j, config_json_path);
}

}  // namespace tq
