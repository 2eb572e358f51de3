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
  } else {
    return err("{}: unsupported model_type '{}' (supported: llama, mistral, qwen2, qwen3)", source,
               printable(c.model_type));
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
