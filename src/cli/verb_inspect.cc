// tq inspect MODEL: what a checkpoint is, how it is stored, and its exact size.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <memory>

#include "cli/verb.h"
#include "model/model_source.h"

namespace tq::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
};

// Groups tensors by storage ("Q4_1", "BF16", "affine 4-bit g64", ...).
std::map<std::string, int> storage_histogram(const TensorSource& ts) {
  std::map<std::string, int> h;
  for (const auto& t : ts.tensors()) h[t.mlx_quant ? quant_spec_str(*t.mlx_quant) : t.storage]++;
  return h;
}

// Modules whose MLX quantization differs from the global spec (mlx-lm's per-module overrides).
nlohmann::json quantization_json(const ModelSource& m) {
  nlohmann::json q = nullptr;
  if (!m.config.quantization) return q;
  const QuantSpec& g = m.config.quantization->global;
  q = {{"global",
        {{"mode", quant_mode_name(g.mode)}, {"bits", g.bits}, {"group_size", g.group_size}}},
       {"modules", nlohmann::json::object()}};
  for (const auto& t : m.tensors->tensors()) {
    if (!t.mlx_quant || *t.mlx_quant == g) continue;
    std::string module = t.name.substr(0, t.name.rfind('.'));
    q["modules"][module] = {{"mode", quant_mode_name(t.mlx_quant->mode)},
                            {"bits", t.mlx_quant->bits},
                            {"group_size", t.mlx_quant->group_size}};
  }
  return q;
}

// Each layer's kind, as Hugging Face's layer_types names them.
std::vector<std::string> layer_kinds(const ModelConfig& c) {
  std::vector<std::string> k;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    k.push_back(c.linear_layer(l) ? "linear_attention" : "full_attention");
  return k;
}

nlohmann::json config_summary(const ModelConfig& c) {
  nlohmann::json j = {{"model_type", c.model_type},
                      {"hidden_size", c.hidden_size},
                      {"num_hidden_layers", c.num_hidden_layers},
                      {"intermediate_size", c.intermediate_size},
                      {"num_attention_heads", c.num_attention_heads},
                      {"num_key_value_heads", c.num_key_value_heads},
                      {"head_dim", c.head_dim},
                      {"vocab_size", c.vocab_size},
                      {"max_position_embeddings", c.max_position_embeddings},
                      {"rms_norm_eps", c.rms_norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"tie_word_embeddings", c.tie_word_embeddings}};
  if (c.rope_scaling)
    j["rope_scaling"] = {{"type", c.rope_scaling->type}, {"factor", c.rope_scaling->factor}};
  if (c.family == Family::kQwen35) {
    j["rotary_dims"] = c.rotary_dims();
    j["linear_num_key_heads"] = c.linear_num_key_heads;
    j["linear_num_value_heads"] = c.linear_num_value_heads;
    j["linear_key_head_dim"] = c.linear_key_head_dim;
    j["linear_value_head_dim"] = c.linear_value_head_dim;
    j["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
    j["full_attention_interval"] = c.full_attention_interval;
    j["layout"] = c.hf_layout ? "hf" : "mlx";
    j["layer_types"] = layer_kinds(c);
  }
  return j;
}

std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", b / double(1ull << 20));
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

Status run_inspect(const InspectOptions& o) {
  TQ_TRY(ModelSource m, open_model(o.model));
  const ModelConfig& c = m.config;
  SizeStats s = size_stats(*m.tensors);
  auto hist = storage_histogram(*m.tensors);
  nlohmann::json q = quantization_json(m);

  if (o.json) {
    nlohmann::json j = {{"path", m.path},
                        {"kind", source_kind_name(m.kind)},
                        {"family", family_name(c.family)},
                        {"config", config_summary(c)},
                        {"tensors", m.tensors->tensors().size()},
                        {"params", s.params},
                        {"bytes", s.bytes},
                        {"file_bytes", m.file_bytes},
                        {"bpw", s.bpw},
                        {"storage", hist},
                        {"quantization", q}};
    fmt::print("{}\n", j.dump(2));
    return ok_status();
  }
  fmt::print("{} ({})\n", m.path, source_kind_name(m.kind));
  fmt::print("  family        {} (model_type {})\n", family_name(c.family), c.model_type);
  fmt::print(
      "  geometry      hidden {}, layers {}, heads {} (kv {}), head_dim {}, mlp {}, vocab {}\n",
      c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
      c.intermediate_size, c.vocab_size);
  if (c.family == Family::kQwen35) {
    fmt::print(
        "  linear attn   Gated DeltaNet: key heads {} x {}, value heads {} x {}, conv kernel {}\n",
        c.linear_num_key_heads, c.linear_key_head_dim, c.linear_num_value_heads,
        c.linear_value_head_dim, c.linear_conv_kernel_dim);
    const std::vector<std::string> kinds = layer_kinds(c);
    const auto full = std::count(kinds.begin(), kinds.end(), "full_attention");
    fmt::print("  layers        {} linear_attention, {} full_attention (gated): {}\n",
               kinds.size() - static_cast<size_t>(full), full, fmt::join(kinds, ", "));
    fmt::print("  layout        {}, rotary dims {} of {}\n",
               c.hf_layout ? "Hugging Face (zero-centred norms, conv1d [C, 1, K])"
                           : "mlx-lm (conv1d [C, K, 1])",
               c.rotary_dims(), c.head_dim);
  }
  fmt::print("  rope          theta {}{}, max positions {}\n", c.rope_theta,
             c.rope_scaling
                 ? fmt::format(", scaling {} x{}", c.rope_scaling->type, c.rope_scaling->factor)
                 : std::string(),
             c.max_position_embeddings);
  fmt::print("  norms         rms_norm_eps {}, tied embeddings {}\n", c.rms_norm_eps,
             c.tie_word_embeddings ? "yes" : "no");
  fmt::print("  tensors       {}\n", m.tensors->tensors().size());
  for (const auto& [k, n] : hist) fmt::print("    {:<22} {} tensors\n", k, n);
  if (c.quantization) {
    fmt::print("  quantization  global {}\n", quant_spec_str(c.quantization->global));
    int shown = 0;
    for (const auto& [module, spec] : q["modules"].items()) {
      if (shown++ == 20) {
        fmt::print("    ... {} more (--json lists all)\n", q["modules"].size() - 20);
        break;
      }
      fmt::print("    {:<44} {} {}-bit g{}\n", module, spec["mode"].get<std::string>(),
                 spec["bits"].get<int>(), spec["group_size"].get<int>());
    }
  }
  fmt::print("  params        {}\n", s.params);
  fmt::print("  size          {} in tensors ({} bytes), {} on disk\n", human_bytes(s.bytes),
             s.bytes, human_bytes(m.file_bytes));
  fmt::print("  bits/weight   {:.4f}\n", s.bpw);
  return ok_status();
}

const bool kRegistered = register_verb(
    {"inspect", "Show a model's family, geometry, tensors, quantization, size and bits per weight",
     10, [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<InspectOptions>();
       app.add_option("model", o->model, "HF or MLX safetensors directory, or a GGUF file")
           ->required();
       app.add_flag("--json", o->json, "Print one JSON object");
       return [o] { return run_inspect(*o); };
     }});

}  // namespace
}  // namespace tq::cli
