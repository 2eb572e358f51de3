#include "recipe/recipe.h"

#include <fstream>
#include <sstream>

namespace tq {

namespace {

using json = nlohmann::json;

constexpr TensorRole kAllRoles[] = {
    TensorRole::kEmbed,       TensorRole::kAttnQ,     TensorRole::kAttnK,
    TensorRole::kAttnV,       TensorRole::kAttnO,     TensorRole::kMlpGate,
    TensorRole::kMlpUp,       TensorRole::kMlpDown,   TensorRole::kNormAttn,
    TensorRole::kNormMlp,     TensorRole::kNormFinal, TensorRole::kLmHead,
    TensorRole::kQNorm,       TensorRole::kKNorm,     TensorRole::kAttnQBias,
    TensorRole::kAttnKBias,   TensorRole::kAttnVBias, TensorRole::kAttnOBias,
    TensorRole::kMlpGateBias, TensorRole::kMlpUpBias, TensorRole::kMlpDownBias,
};

Result<std::optional<int>> opt_int(const json& o, const char* key, const std::string& where) {
  auto it = o.find(key);
  if (it == o.end()) return std::optional<int>();
  if (!it->is_number_integer())
    return err("{}: '{}' must be an integer, got {}", where, key, it->dump());
  int64_t v = it->get<int64_t>();
  if (v < 0 || v > 1024) return err("{}: '{}' = {} is out of range", where, key, v);
  return std::optional<int>(static_cast<int>(v));
}

Result<std::optional<QuantMode>> opt_mode(const json& o, const std::string& where) {
  auto it = o.find("mode");
  if (it == o.end()) return std::optional<QuantMode>();
  if (!it->is_string()) return err("{}: 'mode' must be a string, got {}", where, it->dump());
  auto m = quant_mode_from_name(it->get<std::string>());
  if (!m)
    return err("{}: unknown mode '{}' (affine, mxfp4, nvfp4, mxfp8)", where,
               it->get<std::string>());
  return std::optional<QuantMode>(*m);
}

Result<RecipeRule> parse_rule(const json& o, const std::string& where) {
  if (!o.is_object()) return err("{}: a rule must be an object, got {}", where, o.dump());
  for (const auto& [k, v] : o.items())
    if (k != "match" && k != "layers" && k != "float" && k != "bits" && k != "group_size" &&
        k != "mode" && k != "min_bits")
      return err("{}: unknown key '{}' (match, layers, float, bits, group_size, mode, min_bits)",
                 where, k);
  auto m = o.find("match");
  if (m == o.end() || !m->is_string() || m->get<std::string>().empty())
    return err("{}: 'match' (a glob, \"re:REGEX\" or \"role:NAME\") is required", where);
  TQ_TRY(ModuleMatcher matcher, ModuleMatcher::parse(m->get<std::string>(), where));
  RecipeRule r{std::move(matcher)};
  r.where = where;
  if (auto l = o.find("layers"); l != o.end()) {
    if (!l->is_array()) return err("{}: 'layers' must be an array of layer indices", where);
    for (const auto& x : *l) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        return err("{}: 'layers' must hold non-negative integers, got {}", where, x.dump());
      r.layers.push_back(x.get<int64_t>());
    }
  }
  if (auto f = o.find("float"); f != o.end()) {
    if (!f->is_boolean()) return err("{}: 'float' must be true or false", where);
    r.keep_float = f->get<bool>();
  }
  TQ_TRY(r.mode, opt_mode(o, where));
  TQ_TRY(r.bits, opt_int(o, "bits", where));
  TQ_TRY(r.group_size, opt_int(o, "group_size", where));
  TQ_TRY(r.min_bits, opt_int(o, "min_bits", where));
  if (r.min_bits) {
    if (r.keep_float || r.mode || r.bits || r.group_size)
      return err("{}: a \"min_bits\" rule is a constraint only (no float, mode, bits, group_size)",
                 where);
    if (*r.min_bits < 1 || *r.min_bits > 8)
      return err("{}: min_bits must be 1..8, got {}", where, *r.min_bits);
    return r;
  }
  if (r.keep_float && (r.mode || r.bits || r.group_size))
    return err("{}: a rule with \"float\": true takes no mode, bits or group_size", where);
  if (!r.keep_float && !r.mode && !r.bits && !r.group_size)
    return err(
        "{}: a rule needs \"float\": true, \"min_bits\" or at least one of mode, bits, "
        "group_size",
        where);
  return r;
}

json spec_fields_json(const std::optional<QuantMode>& mode, const std::optional<int>& bits,
                      const std::optional<int>& group) {
  json j = json::object();
  if (mode) j["mode"] = quant_mode_name(*mode);
  if (bits) j["bits"] = *bits;
  if (group) j["group_size"] = *group;
  return j;
}

}  // namespace

Result<ModuleMatcher> ModuleMatcher::parse(std::string_view pattern, const std::string& source) {
  ModuleMatcher m;
  m.text_ = std::string(pattern);
  m.source_ = source;
  if (pattern.rfind("role:", 0) == 0) {
    std::string_view name = pattern.substr(5);
    for (TensorRole r : kAllRoles)
      if (tensor_role_name(r) == name) m.role_ = r;
    if (!m.role_)
      return err(
          "{}: unknown role '{}' in '{}' (quantizable roles: embed, attn_q, attn_k, attn_v, "
          "attn_o, mlp_gate, mlp_up, mlp_down, lm_head)",
          source, name, pattern);
    return m;
  }
  if (pattern.rfind("re:", 0) != 0) return m;  // a glob
  std::string_view re = pattern.substr(3);
  auto compiled = text::Regex::compile_whole(re);
  if (!compiled)
    return err("{}: invalid regular expression '{}': {}", source, re, compiled.error().message);
  Status cost = compiled->check_cost();
  if (!cost.ok())
    return err(
        "{}: pattern too costly to match: '{}' (PCRE2 {}; nested quantifiers such as (a+)+ or "
        "(.*)* backtrack exponentially)",
        source, pattern, cost.error().message);
  m.re_ = std::move(compiled).value();
  return m;
}

Result<bool> ModuleMatcher::matches(std::string_view module_path, TensorRole role) const {
  if (role_) return *role_ == role;
  if (!re_) return glob_match(text_, module_path);
  auto r = re_->match_whole(module_path);
  if (!r)
    return err("{}: pattern too costly to match: '{}' (PCRE2 {} on '{}')", source_, text_,
               r.error().message, module_path);
  return r;
}

bool glob_match(std::string_view glob, std::string_view s) {
  size_t g = 0, i = 0;
  size_t star = std::string_view::npos, resume = 0;  // the last '*' and where its run would end
  while (i < s.size()) {
    if (g < glob.size() && glob[g] == '*') {
      star = g++;
      resume = i;
    } else if (g < glob.size() && (glob[g] == '?' || glob[g] == s[i])) {
      ++g, ++i;
    } else if (star != std::string_view::npos) {
      g = star + 1;  // the last '*' takes one more byte; earlier stars never need to
      i = ++resume;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

QuantSpec rule_spec(const RecipeRule& r, const QuantSpec& global) {
  QuantSpec s = global;
  if (r.mode && *r.mode != global.mode) s = default_spec_for_mode(*r.mode);
  if (r.bits) s.bits = *r.bits;
  if (r.group_size) s.group_size = *r.group_size;
  return s;
}

json Recipe::to_json() const {
  json j = spec_fields_json(mode, bits, group_size);
  j["name"] = name;
  json out = json::array();
  for (const auto& r : rules) {
    json o = r.keep_float ? json{{"float", true}} : spec_fields_json(r.mode, r.bits, r.group_size);
    if (r.min_bits) o["min_bits"] = *r.min_bits;
    o["match"] = r.match.text();
    if (!r.layers.empty()) o["layers"] = r.layers;
    out.push_back(std::move(o));
  }
  j["rules"] = std::move(out);
  return j;
}

Result<Recipe> parse_recipe(const json& j, const std::string& source) {
  if (!j.is_object()) return err("{}: a recipe must be a JSON object", source);
  for (const auto& [k, v] : j.items())
    if (k != "rules" && k != "bits" && k != "group_size" && k != "mode" && k != "description")
      return err("{}: unknown key '{}' (mode, bits, group_size, rules, description)", source, k);
  Recipe r;
  r.name = source;
  TQ_TRY(r.mode, opt_mode(j, source));
  TQ_TRY(r.bits, opt_int(j, "bits", source));
  TQ_TRY(r.group_size, opt_int(j, "group_size", source));
  auto rules = j.find("rules");
  if (rules == j.end()) return r;
  if (!rules->is_array()) return err("{}: 'rules' must be an array", source);
  for (size_t i = 0; i < rules->size(); ++i) {
    TQ_TRY(RecipeRule rule, parse_rule((*rules)[i], fmt::format("{} rule {}", source, i + 1)));
    r.rules.push_back(std::move(rule));
  }
  return r;
}

Result<Recipe> load_recipe_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err("{}: cannot open recipe file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    return err("{}: invalid JSON: {}", path, e.what());
  }
  return parse_recipe(j, path);
}

bool is_recipe_preset(std::string_view name) {
  return name == "mixed_2_6" || name == "mixed_3_4" || name == "mixed_3_6" || name == "mixed_4_6";
}

Result<Recipe> preset_recipe(std::string_view name, int64_t num_layers, int group_size) {
  int low = 0, high = 6;
  if (name == "mixed_2_6") {
    low = 2;
  } else if (name == "mixed_3_4") {
    low = 3;
    high = 4;
  } else if (name == "mixed_3_6") {
    low = 3;
  } else if (name == "mixed_4_6") {
    low = 4;
  } else {
    return err("unknown recipe preset '{}' (mixed_2_6, mixed_3_4, mixed_3_6, mixed_4_6)", name);
  }
  const int64_t l8 = num_layers / 8;
  std::vector<int64_t> more;  // mlx-lm's use_more_bits
  for (int64_t i = 0; i < num_layers; ++i)
    if (i < l8 || i >= 7 * num_layers / 8 || (i - l8) % 3 == 2) more.push_back(i);
  Recipe r;
  r.name = std::string(name);
  r.mode = QuantMode::kAffine;
  r.bits = low;
  r.group_size = group_size;
  const std::string where = fmt::format("preset {}", name);
  for (const char* m : {"role:attn_v", "role:mlp_down", "role:lm_head"}) {
    TQ_TRY(ModuleMatcher matcher, ModuleMatcher::parse(m, where));
    RecipeRule rule{std::move(matcher)};
    if (std::string_view(m) != "role:lm_head") rule.layers = more;
    rule.bits = high;
    rule.required = false;  // tied models have no lm_head
    rule.where = where;
    r.rules.push_back(std::move(rule));
  }
  return r;
}

}  // namespace tq
