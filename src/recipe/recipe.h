// Recipes: ordered rules that choose a QuantSpec (or float) per module, from a JSON file or a
// built-in preset equal to mlx-lm's mixed_2_6 / mixed_3_4 / mixed_3_6 / mixed_4_6.
//
// Recipe file (JSON):
//   {"mode": "affine", "bits": 4, "group_size": 64,          <- optional defaults
//    "rules": [                                               <- first matching rule wins
//      {"match": "lm_head", "bits": 6},
//      {"match": "model.layers.*.mlp.down_proj", "layers": [0, 1, 29], "bits": 6},
//      {"match": "re:.*\\.(q|k)_proj", "group_size": 32},
//      {"match": "role:attn_v", "mode": "mxfp8"},
//      {"match": "model.embed_tokens", "float": true}]}
// A match is a glob on the module path ("*" any run of characters, "?" one), "re:REGEX"
// (PCRE2 syntax, whole path), or "role:NAME" (a role of the family tensor table, e.g. mlp_down).
// A regex that backtracks past PCRE2's match or depth limit is refused when the recipe loads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "formats/quant_spec.h"
#include "model/tensor_table.h"
#include "text/regex.h"

namespace tq {

class ModuleMatcher {
 public:
  // `source` names the recipe file (or flag) in errors.
  static Result<ModuleMatcher> parse(std::string_view pattern, const std::string& source);
  // An error (naming the source) only when a regex exceeds PCRE2's limits on this path.
  Result<bool> matches(std::string_view module_path, TensorRole role) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::string source_;
  std::optional<TensorRole> role_;
  std::optional<text::Regex> re_;  // "re:" patterns; a glob is matched by glob_match
};

// A glob ("*" any run of bytes, "?" one byte, everything else literal) against all of `s`,
// without backtracking beyond the last '*': at most |glob| * |s| steps.
bool glob_match(std::string_view glob, std::string_view s);

struct RecipeRule {
  ModuleMatcher match;
  std::vector<int64_t> layers;  // empty: any layer; else only modules of these decoder layers
  bool keep_float = false;
  std::optional<QuantMode> mode;
  std::optional<int> bits, group_size;
  // A constraint rule ({"match": …, "min_bits": N}) decides no spec: it raises an affine spec
  // below N bits to N, and allocation (--target-bpw) only chooses specs of at least N bits.
  std::optional<int> min_bits;
  bool required = true;  // a rule that matches no module is an error (presets: not required)
  std::string where;     // "recipe.json rule 2", "--keep-float 'lm_head'"
};

struct Recipe {
  std::string name;  // file path or preset name
  std::optional<QuantMode> mode;
  std::optional<int> bits, group_size;
  std::vector<RecipeRule> rules;
  nlohmann::json to_json() const;  // what tq_metadata.json records
};

// The spec a rule gives, on top of the global one: a rule naming another mode starts from
// that mode's defaults (as mlx-lm's per-module dicts do), then takes its bits/group_size.
QuantSpec rule_spec(const RecipeRule& r, const QuantSpec& global);

Result<Recipe> parse_recipe(const nlohmann::json& j, const std::string& source);
Result<Recipe> load_recipe_file(const std::string& path);

bool is_recipe_preset(std::string_view name);  // mixed_2_6, mixed_3_4, mixed_3_6, mixed_4_6
// mlx-lm's preset for a model of `num_layers` decoder layers at `group_size` (affine): v_proj
// and down_proj of the layers i < L/8, i >= 7L/8 or (i - L/8) % 3 == 2 and lm_head get the
// high bits; everything else (embed_tokens included) the low bits.
Result<Recipe> preset_recipe(std::string_view name, int64_t num_layers, int group_size);

}  // namespace tq
