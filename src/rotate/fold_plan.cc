#include "rotate/fold_plan.h"

#include <algorithm>

#include <fmt/ranges.h>

namespace tq {

namespace {

const TensorKind* row_of(std::span<const TensorKind> table, TensorRole role) {
  for (const auto& k : table)
    if (k.role == role) return &k;
  return nullptr;
}

bool feeds_a_linear(std::span<const TensorKind> table, TensorRole norm) {
  return std::any_of(table.begin(), table.end(),
                     [&](const TensorKind& k) { return k.fed_by == norm || k.fed_by_hi == norm; });
}

Result<RotationSpec> rotation_spec(RotationKind kind, int64_t n, std::string_view what,
                                   std::string_view flag) {
  RotationSpec s{kind, n};
  if (kind != RotationKind::kHadamard) return s;
  std::optional<HadamardSplit> split = hadamard_split(n);
  if (!split) {
    // make_rotation words the error (size, odd part, suggestion).
    auto r = make_rotation(kind, n, 0, what, flag);
    return r.ok() ? err("{} {}: no Hadamard construction", what, n) : r.error();
  }
  s.k = split->k;
  s.m = split->m;
  s.construction = split->construction;
  return s;
}

std::string spec_str(const RotationSpec& s) {
  if (s.kind == RotationKind::kHadamard)
    return fmt::format("hadamard n={} = {}·2^{} (H_{}: {})", s.n, s.k, s.m, s.k, s.construction);
  return fmt::format("{} n={}", rotation_kind_name(s.kind), s.n);
}

}  // namespace

std::string_view fold_op_name(FoldOp op) {
  switch (op) {
    case FoldOp::kCloneEmbed:
      return "untie(copy embed_tokens)";
    case FoldOp::kGammaCols:
      return "gamma";
    case FoldOp::kSetOnes:
      return "gain->ones";
    case FoldOp::kR1Right:
      return "W·R1";
    case FoldOp::kR1LeftT:
      return "R1ᵀ·W";
    case FoldOp::kR2LeftT:
      return "R2ᵀ·W per kv head (rows)";
    case FoldOp::kR2Right:
      return "W·R2 per head (cols)";
  }
  return "?";
}

Result<Rotation> FoldPlan::make_r1() const {
  return make_rotation(r1.kind, r1.n, stream_seed(options.seed, 0), "hidden_size", "--r1");
}

Result<Rotation> FoldPlan::make_r2(int64_t layer) const {
  return make_rotation(r2.kind, r2.n, stream_seed(options.seed, 1 + static_cast<uint64_t>(layer)),
                       "head_dim", "--r2");
}

Result<RotationOptions> parse_rotation_options(std::string_view r1, std::string_view r2,
                                               uint64_t seed) {
  RotationOptions ro;
  auto k1 = parse_rotation_kind(r1);
  if (!k1.ok()) return err("--r1: {}", k1.error().message);
  auto k2 = parse_rotation_kind(r2.empty() ? std::string_view("hadamard") : r2);
  if (!k2.ok()) return err("--r2: {}", k2.error().message);
  ro.r1 = *k1;
  ro.r2 = *k2;
  ro.r2_given = !r2.empty();
  ro.seed = seed;
  return ro;
}

nlohmann::json rotation_identity(const RotationOptions& ro) {
  return {{"r1", std::string(rotation_kind_name(ro.r1))},
          {"r2", std::string(rotation_kind_name(ro.r2))},
          {"seed", ro.seed}};
}

Result<FoldPlan> plan_folds(const ModelConfig& cfg, const RotationOptions& opts) {
  FoldPlan p;
  p.config = cfg;
  p.options = opts;
  // Untie and the γ-fold exist only so that R1 can rotate the residual stream; without R1 they
  // are skipped (folding SmolLM2's tiny gains into the weights alone costs 3-bit RTN ~6x PPL).
  const bool r1_on = opts.r1 != RotationKind::kNone;
  p.untie = cfg.tie_word_embeddings && r1_on;
  std::span<const TensorKind> table = family_table(cfg.family);
  const std::string fam(family_name(cfg.family));

  // R1 needs every residual-space gain folded away; the table says which norm feeds what.
  if (opts.r1 != RotationKind::kNone) {
    for (const auto& k : table)
      if (k.dims.size() == 1 && k.row_space == Space::kResidual && k.side == ResidualSide::kNone &&
          !feeds_a_linear(table, k.role) && !k.ones_under_r1)
        return err("{}: R1 cannot fold: the gain {} feeds no linear", fam, k.pattern);
    TQ_TRY(p.r1, rotation_spec(opts.r1, cfg.hidden_size, "hidden_size", "--r1"));
  }
  if (opts.r2 != RotationKind::kNone) {
    const bool v_side = std::any_of(table.begin(), table.end(), [](const TensorKind& k) {
      return k.row_space == Space::kHeadValue;
    });
    const bool o_side = std::any_of(table.begin(), table.end(), [](const TensorKind& k) {
      return k.col_space == Space::kHeadValue;
    });
    if (!v_side || !o_side) {
      const std::string why = r2_off_reason(cfg.family).empty()
                                  ? std::string("no per-head value space between v_proj and o_proj")
                                  : std::string(r2_off_reason(cfg.family));
      if (opts.r2_given)
        return err("{}: --r2 {}: R2 is off for this family ({}); drop --r2 or give --r2 none", fam,
                   rotation_kind_name(opts.r2), why);
      p.notes.push_back(fmt::format("R2 off for {}: {}", fam, why));
    } else if (cfg.num_key_value_heads < 1 || cfg.head_dim < 1 ||
               cfg.num_attention_heads % cfg.num_key_value_heads != 0) {
      p.notes.push_back(fmt::format("R2 off: {} attention heads do not group over {} kv heads",
                                    cfg.num_attention_heads, cfg.num_key_value_heads));
    } else if (opts.r2 == RotationKind::kHadamard && !is_power_of_two(cfg.head_dim)) {
      return err("head_dim {}: R2 hadamard needs a power of two; use --r2 random", cfg.head_dim);
    } else {
      TQ_TRY(p.r2, rotation_spec(opts.r2, cfg.head_dim, "head_dim", "--r2"));
    }
  }

  // The tensors of the untied geometry (lm_head included), each per-layer row once (qwen3_5's
  // DeltaNet and attention layers hold different rows; apply_layer skips rows a layer lacks).
  ModelConfig view = cfg;
  view.tie_word_embeddings = cfg.tie_word_embeddings && !p.untie;
  // The fold runs on the output's names (qwen3_5: mlx-lm's layout, norms already shifted).
  view.hf_layout = false;
  std::vector<const TensorKind*> seen;
  for (const TensorSpec& s : expected_tensors(view)) {
    const TensorKind& k = *s.kind;
    if (std::find(seen.begin(), seen.end(), &k) != seen.end()) continue;
    seen.push_back(&k);
    TensorFold f{&k, {}};
    if (k.role == TensorRole::kLmHead && p.untie) f.steps.push_back({FoldOp::kCloneEmbed});
    if (k.fed_by && r1_on)
      f.steps.push_back({FoldOp::kGammaCols, row_of(table, *k.fed_by),
                         k.fed_by_hi ? row_of(table, *k.fed_by_hi) : nullptr});
    const bool gain = k.dims.size() == 1 && (feeds_a_linear(table, k.role) || k.ones_under_r1);
    if (gain && r1_on) f.steps.push_back({FoldOp::kSetOnes});
    if (p.r1.kind != RotationKind::kNone) {
      if (k.col_space == Space::kResidual) f.steps.push_back({FoldOp::kR1Right});
      if (k.row_space == Space::kResidual && !gain) f.steps.push_back({FoldOp::kR1LeftT});
    }
    if (p.r2.kind != RotationKind::kNone) {
      if (k.row_space == Space::kHeadValue) f.steps.push_back({FoldOp::kR2LeftT});
      if (k.col_space == Space::kHeadValue) f.steps.push_back({FoldOp::kR2Right});
    }
    (s.layer < 0 ? p.globals : p.layer).push_back(std::move(f));
  }
  return p;
}

std::vector<std::string> describe_plan(const FoldPlan& p) {
  std::vector<std::string> out;
  out.push_back(fmt::format("rotation fold ({}), seed {}, fold in {}", family_name(p.config.family),
                            p.options.seed,
                            p.options.fold_dtype == FoldDType::kF64 ? "f64" : "f32"));
  if (p.untie) {
    std::string head = "lm_head.weight", embed = "model.embed_tokens.weight";
    for (const TensorKind& k : family_table(p.config.family)) {
      if (k.role == TensorRole::kLmHead) head = k.pattern;
      if (k.role == TensorRole::kEmbed) embed = k.pattern;
    }
    out.push_back(
        fmt::format("untie: {} = copy of {}; config tie_word_embeddings=false", head, embed));
  }
  out.push_back("R1: " + (p.r1.kind == RotationKind::kNone ? "none" : spec_str(p.r1)));
  out.push_back("R2: " + (p.r2.kind == RotationKind::kNone
                              ? std::string("none")
                              : spec_str(p.r2) + ", one per layer (seeded per layer)"));
  for (const auto& n : p.notes) out.push_back("note: " + n);
  auto line = [&](const TensorFold& f) {
    std::vector<std::string> ops;
    for (const auto& s : f.steps)
      ops.push_back(s.op != FoldOp::kGammaCols ? std::string(fold_op_name(s.op))
                    : s.norm_hi != nullptr
                        ? fmt::format("gamma({} | {})", tensor_role_name(s.norm->role),
                                      tensor_role_name(s.norm_hi->role))
                        : fmt::format("gamma({})", tensor_role_name(s.norm->role)));
    out.push_back(fmt::format(
        "  {}: {}", f.kind->pattern,
        ops.empty() ? std::string("unchanged") : fmt::format("{}", fmt::join(ops, ", "))));
  };
  for (const auto& f : p.globals) line(f);
  for (const auto& f : p.layer) line(f);
  return out;
}

Status fold_config(const FoldPlan& plan, nlohmann::json& config) {
  if (!config.is_object()) return err("config.json: not an object");
  if (plan.untie) config["tie_word_embeddings"] = false;
  // qwen3_5 reads the text model's fields (the tie included) from text_config when it exists.
  if (plan.untie && config.contains("text_config") && config["text_config"].is_object())
    config["text_config"]["tie_word_embeddings"] = false;
  return ok_status();
}

}  // namespace tq
