#include "recipe/quant_plan.h"

#include <algorithm>

#include <fmt/ranges.h>

namespace tq {

namespace {

using json = nlohmann::json;

json spec_json(const QuantSpec& s) {
  // Always all three keys: a per-module dict without "mode" means affine to mlx-lm.
  return {{"group_size", s.group_size}, {"bits", s.bits}, {"mode", quant_mode_name(s.mode)}};
}

// "--mode nvfp4 --group-size 32" for the flags given explicitly, else the recipe's name.
std::string global_source(const PlanOptions& o) {
  std::vector<std::string> parts;
  if (o.mode) parts.push_back(fmt::format("--mode {}", quant_mode_name(*o.mode)));
  if (o.bits) parts.push_back(fmt::format("--bits {}", *o.bits));
  if (o.group_size) parts.push_back(fmt::format("--group-size {}", *o.group_size));
  if (o.recipe && (o.recipe->mode || o.recipe->bits || o.recipe->group_size))
    parts.push_back(fmt::format("recipe {}", o.recipe->name));
  if (parts.empty()) return "default quantization";
  return fmt::format("{}", fmt::join(parts, " "));
}

Result<QuantSpec> resolve_global(const PlanOptions& o) {
  std::optional<QuantMode> rmode;
  std::optional<int> rbits, rgroup;
  if (o.recipe && (!o.mode || !o.recipe->mode || *o.recipe->mode == *o.mode)) {
    rmode = o.recipe->mode;
    rbits = o.recipe->bits;
    rgroup = o.recipe->group_size;
  }
  QuantMode mode = o.mode ? *o.mode : rmode.value_or(QuantMode::kAffine);
  QuantSpec s = default_spec_for_mode(mode);
  if (o.bits) {
    s.bits = *o.bits;
  } else if (rbits) {
    s.bits = *rbits;
  }
  if (o.group_size) {
    s.group_size = *o.group_size;
  } else if (rgroup) {
    s.group_size = *rgroup;
  }
  Status st = validate_quant_spec(s);
  if (!st.ok()) return err("{}: {}", global_source(o), st.error().message);
  return s;
}

// The largest MLX group (128, 64, 32) dividing `cols` for this mode, or 0.
int fitting_group(const QuantSpec& s, int64_t cols) {
  if (s.mode != QuantMode::kAffine) return 0;
  for (int g : {128, 64, 32})
    if (g < s.group_size && cols % g == 0) return g;
  return 0;
}

}  // namespace

uint64_t quantized_bytes(const QuantSpec& s, int64_t rows, int64_t cols, DType dtype) {
  const uint64_t r = static_cast<uint64_t>(rows), c = static_cast<uint64_t>(cols);
  const uint64_t groups = r * (c / static_cast<uint64_t>(s.group_size));
  const uint64_t weight = r * (c * static_cast<uint64_t>(s.bits) / 32) * 4;
  if (quant_mode_has_biases(s.mode)) return weight + 2 * groups * dtype_size(dtype);
  return weight + groups;  // one U8 scale per group
}

std::vector<TensorDecl> QuantPlan::stored_tensors() const {
  std::vector<TensorDecl> out;
  for (const auto& e : entries) {
    if (!e.spec) {
      out.push_back({e.name, float_dtype(e), e.shape});
      continue;
    }
    const int64_t rows = e.shape[0], cols = e.shape[1];
    const bool affine = quant_mode_has_biases(e.spec->mode);
    out.push_back({e.module + ".weight", DType::kU32, {rows, cols * e.spec->bits / 32}});
    Shape ss = {rows, cols / e.spec->group_size};
    out.push_back({e.module + ".scales", affine ? dtype : DType::kU8, ss});
    if (affine) out.push_back({e.module + ".biases", dtype, ss});
  }
  return out;
}

std::vector<TensorInfo> QuantPlan::logical_tensors() const {
  std::vector<TensorInfo> out;
  for (const auto& e : entries) {
    TensorInfo t;
    t.name = e.name;
    t.shape = e.shape;
    if (e.spec) {
      const bool affine = quant_mode_has_biases(e.spec->mode);
      t.storage = std::string(quant_mode_name(e.spec->mode));
      t.stored_dtype = affine ? dtype : DType::kU8;
      t.mlx_quant = *e.spec;
      t.stored_bytes = quantized_bytes(*e.spec, e.shape[0], e.shape[1], dtype);
    } else {
      const DType fd = float_dtype(e);
      t.storage = std::string(dtype_name(fd));
      t.stored_dtype = fd;
      t.stored_bytes = static_cast<uint64_t>(shape_numel(e.shape)) * dtype_size(fd);
    }
    out.push_back(std::move(t));
  }
  std::sort(out.begin(), out.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return out;
}

// The model's size: the qwen3_5 MTP companion (its own file, which mlx-lm never loads) is left
// out, so bpw is what `tq inspect` reads from the artifact.
SizeStats QuantPlan::size() const {
  std::vector<TensorInfo> all = logical_tensors(), model;
  for (size_t i = 0; i < all.size() && i < entries.size(); ++i)
    if (entries[i].kind == nullptr || !entries[i].kind->companion())
      model.push_back(std::move(all[i]));
  return size_stats(model);
}

std::map<std::string, QuantSpec> QuantPlan::overrides() const {
  std::map<std::string, QuantSpec> out;
  for (const auto& e : entries)
    if (e.spec && *e.spec != global) out.emplace(e.module, *e.spec);
  return out;
}

json QuantPlan::quantization_json() const {
  json q = spec_json(global);
  for (const auto& [module, spec] : overrides()) q[module] = spec_json(spec);
  return q;
}

bool QuantPlan::any_quantized() const {
  for (const auto& e : entries)
    if (e.kind->quantizable && e.spec) return true;
  return false;
}

json QuantPlan::modules_json() const {
  json m = json::object();
  for (const auto& e : entries) {
    if (!e.kind->quantizable) continue;
    m[e.module] = e.spec ? spec_json(*e.spec) : json("float");
  }
  return m;
}

Result<QuantPlan> build_plan(const ModelConfig& cfg, const PlanOptions& opts) {
  QuantPlan plan;
  plan.config = cfg;
  plan.dtype = opts.dtype;
  if (opts.dtype != DType::kF32 && opts.dtype != DType::kF16 && opts.dtype != DType::kBF16)
    return err("--dtype {}: float tensors must be f32, f16 or bf16", dtype_name(opts.dtype));
  TQ_TRY(plan.global, resolve_global(opts));

  // --keep-float patterns come first: they override the recipe.
  std::vector<RecipeRule> rules;
  for (const auto& pat : opts.keep_float) {
    std::string where = fmt::format("--keep-float '{}'", pat);
    TQ_TRY(ModuleMatcher m, ModuleMatcher::parse(pat, where));
    RecipeRule r{std::move(m)};
    r.keep_float = true;
    r.where = where;
    rules.push_back(std::move(r));
  }
  if (opts.recipe)
    for (const auto& r : opts.recipe->rules) rules.push_back(r);
  for (const auto& r : rules) {
    if (r.keep_float || r.min_bits) continue;
    Status st = validate_quant_spec(rule_spec(r, plan.global));
    if (!st.ok()) return err("{}: {}", r.where, st.error().message);
  }

  std::vector<bool> used(rules.size(), false);
  for (TensorSpec& t : expected_tensors(cfg)) {
    PlanEntry e;
    e.name = t.name;
    e.shape = t.shape;
    e.kind = t.kind;
    e.layer = t.layer;
    if (!t.kind->quantizable) {
      e.decided_by = "not quantizable";
      plan.entries.push_back(std::move(e));
      continue;
    }
    e.module = t.name.substr(0, t.name.rfind('.'));
    const RecipeRule* chosen = nullptr;
    const RecipeRule* min_rule = nullptr;
    for (size_t i = 0; i < rules.size(); ++i) {
      const RecipeRule& r = rules[i];
      if (!r.layers.empty() &&
          std::find(r.layers.begin(), r.layers.end(), t.layer) == r.layers.end())
        continue;
      TQ_TRY(bool hit, r.match.matches(e.module, t.kind->role));
      if (!hit) continue;
      used[i] = true;
      if (r.min_bits) {
        if (*r.min_bits > e.min_bits) e.min_bits = *r.min_bits, min_rule = &r;
      } else if (!chosen) {
        chosen = &r;
      }
    }
    if (!chosen) {
      e.spec = plan.global;
      e.decided_by = "default";
    } else {
      if (!chosen->keep_float) e.spec = rule_spec(*chosen, plan.global);
      e.decided_by = chosen->where;
      e.pinned = true;
    }
    if (e.spec && e.spec->bits < e.min_bits) {
      if (e.spec->mode != QuantMode::kAffine)
        return err("{}: min_bits {} but {} is {} ({} bits); pin it with a rule instead",
                   min_rule->where, e.min_bits, e.module, quant_spec_str(*e.spec), e.spec->bits);
      e.spec->bits = e.min_bits;
      e.decided_by = min_rule->where;
      Status st = validate_quant_spec(*e.spec);
      if (!st.ok()) return err("{}: {}", min_rule->where, st.error().message);
    }
    plan.entries.push_back(std::move(e));
  }
  for (size_t i = 0; i < rules.size(); ++i)
    if (rules[i].required && !used[i])
      return err("{}: matches no quantizable module of this {} model (match '{}')", rules[i].where,
                 family_name(cfg.family), rules[i].match.text());

  // mlx-lm silently leaves such modules float; we name them and say how to choose.
  std::vector<const PlanEntry*> bad;
  for (const auto& e : plan.entries)
    if (e.spec && e.shape[1] % e.spec->group_size != 0) bad.push_back(&e);
  if (!bad.empty()) {
    const PlanEntry& e = *bad[0];
    const int64_t cols = e.shape[1];
    int g = fitting_group(*e.spec, cols);
    std::string smaller = g ? fmt::format(
                                  "give it a smaller group (recipe rule {{\"match\": \"{}\", "
                                  "\"group_size\": {}}}, or --group-size {}) or ",
                                  e.module, g, g)
                            : std::string();
    std::string more;
    if (bad.size() > 1)
      more = fmt::format(" ({} more modules have the same problem, e.g. {})", bad.size() - 1,
                         bad[1]->module);
    return err(
        "{}: input width {} is not a multiple of the group size {} ({}, from {}); {}keep it "
        "float (--keep-float '{}'){}",
        e.module, cols, e.spec->group_size, quant_spec_str(*e.spec), e.decided_by, smaller,
        e.module, more);
  }
  return plan;
}

}  // namespace tq
