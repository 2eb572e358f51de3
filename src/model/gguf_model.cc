#include "model/gguf_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <numbers>

#include "model/tensor_table.h"

namespace tq {

namespace {

enum class QkRole : uint8_t { kNone, kQ, kK };

// GGUF tensor name -> tensor role; the HF name comes from the family's tensor table. Per-layer
// rows match "blk.N.<gguf>", the others whole names.
struct NameRule {
  std::string_view gguf;
  TensorRole role;
  bool per_layer;
  QkRole qk;
};

// clang-format off
constexpr NameRule kNameTable[] = {
    {"token_embd.weight",  TensorRole::kEmbed,       false, QkRole::kNone},
    {"output_norm.weight", TensorRole::kNormFinal,   false, QkRole::kNone},
    {"output.weight",      TensorRole::kLmHead,      false, QkRole::kNone},
    {"attn_norm.weight",   TensorRole::kNormAttn,    true,  QkRole::kNone},
    {"attn_q.weight",      TensorRole::kAttnQ,       true,  QkRole::kQ},
    {"attn_k.weight",      TensorRole::kAttnK,       true,  QkRole::kK},
    {"attn_v.weight",      TensorRole::kAttnV,       true,  QkRole::kNone},
    {"attn_output.weight", TensorRole::kAttnO,       true,  QkRole::kNone},
    {"attn_q.bias",        TensorRole::kAttnQBias,   true,  QkRole::kQ},
    {"attn_k.bias",        TensorRole::kAttnKBias,   true,  QkRole::kK},
    {"attn_v.bias",        TensorRole::kAttnVBias,   true,  QkRole::kNone},
    {"attn_output.bias",   TensorRole::kAttnOBias,   true,  QkRole::kNone},
    {"attn_q_norm.weight", TensorRole::kQNorm,       true,  QkRole::kNone},
    {"attn_k_norm.weight", TensorRole::kKNorm,       true,  QkRole::kNone},
    {"ffn_norm.weight",    TensorRole::kNormMlp,     true,  QkRole::kNone},
    {"ffn_gate.weight",    TensorRole::kMlpGate,     true,  QkRole::kNone},
    {"ffn_up.weight",      TensorRole::kMlpUp,       true,  QkRole::kNone},
    {"ffn_down.weight",    TensorRole::kMlpDown,     true,  QkRole::kNone},
    {"ffn_gate.bias",      TensorRole::kMlpGateBias, true,  QkRole::kNone},
    {"ffn_up.bias",        TensorRole::kMlpUpBias,   true,  QkRole::kNone},
    {"ffn_down.bias",      TensorRole::kMlpDownBias, true,  QkRole::kNone},
};
// clang-format on

// Tensors llama.cpp derives from the config; they have no HF weight.
constexpr std::string_view kDerivedTensors[] = {"rope_freqs.weight"};

struct Mapped {
  const NameRule* rule;
  int64_t layer;  // -1 for global tensors
};

std::optional<Mapped> lookup(std::string_view name) {
  constexpr std::string_view kBlk = "blk.";
  if (name.starts_with(kBlk)) {
    std::string_view rest = name.substr(kBlk.size());
    int64_t layer = 0;
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
    if (ec != std::errc() || p == rest.data() || p == rest.data() + rest.size() || *p != '.' ||
        layer < 0 || (rest[0] == '0' && p - rest.data() > 1))
      return std::nullopt;
    std::string_view suffix(p + 1, rest.data() + rest.size() - (p + 1));
    for (const auto& r : kNameTable)
      if (r.per_layer && r.gguf == suffix) return Mapped{&r, layer};
    return std::nullopt;
  }
  for (const auto& r : kNameTable)
    if (!r.per_layer && r.gguf == name) return Mapped{&r, -1};
  return std::nullopt;
}

// The HF name of a mapped tensor in `family`; nullopt if the family has no such tensor.
std::optional<std::string> hf_name(const Mapped& m, Family family) {
  for (const TensorKind& k : family_table(family))
    if (k.role == m.rule->role && k.per_layer() == (m.layer >= 0)) return tensor_name(k, m.layer);
  return std::nullopt;
}

// f32 metadata widened to double prints as 9.999999747378752e-06; keep the shortest decimal
// that round-trips through f32 instead (1e-05), as the HF config had it.
double tidy_f32(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) != v) return v;
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f);
  if (ec != std::errc()) return v;
  *end = '\0';
  return std::strtod(buf, nullptr);
}

Result<int64_t> require_int(const GgufFile& f, const std::string& key) {
  TQ_TRY(auto v, f.get_int(key));
  if (!v) return err("{}: missing metadata '{}'", f.path(), key);
  return *v;
}

DType stored_dtype_of(const GgufTensorInfo& t) {
  if (t.type_name == "F32") return DType::kF32;
  if (t.type_name == "BF16") return DType::kBF16;
  return DType::kF16;  // F16, and the f16 scales of every ggml block type
}

// llama.cpp stores Llama-3 rope scaling as per-frequency divisors (rope_freqs.weight). Recover
// the HF rope_scaling by matching them against the llama3 rule with the usual parameters.
Result<nlohmann::json> llama3_rope_scaling(const GgufFile& f, const GgufTensorInfo& t, double theta,
                                           int64_t dim) {
  TQ_TRY(FloatTensor freqs, f.load_f32(t));
  if (dim <= 0 || static_cast<int64_t>(freqs.data.size()) != dim / 2)
    return err("{}: rope_freqs.weight has {} values, expected head_dim/2 = {}", f.path(),
               freqs.data.size(), dim / 2);
  double factor = *std::max_element(freqs.data.begin(), freqs.data.end());
  for (int64_t old_ctx : {8192, 4096, 2048, 16384, 32768}) {
    const double low = 1.0, high = 4.0;
    bool match = true;
    for (int64_t i = 0; i < dim / 2 && match; ++i) {
      double inv = 1.0 / std::pow(theta, static_cast<double>(2 * i) / dim);
      double wavelen = 2 * std::numbers::pi / inv;
      double want;
      if (wavelen < old_ctx / high) {
        want = 1.0;
      } else if (wavelen > old_ctx / low) {
        want = factor;
      } else {
        double smooth = (old_ctx / wavelen - low) / (high - low);
        want = 1.0 / ((1 - smooth) / factor + smooth);
      }
      match = std::abs(freqs.data[i] - want) <= 1e-4 * std::max(1.0, want);
    }
    if (match)
      return nlohmann::json{{"factor", tidy_f32(factor)},
                            {"high_freq_factor", high},
                            {"low_freq_factor", low},
                            {"original_max_position_embeddings", old_ctx},
                            {"rope_type", "llama3"}};
  }
  return err("{}: rope_freqs.weight does not follow llama3 rope scaling (factor {}, low 1, high 4)",
             f.path(), factor);
}

}  // namespace

std::optional<std::string> gguf_to_hf_name(std::string_view gguf_name, Family family) {
  auto m = lookup(gguf_name);
  if (!m) return std::nullopt;
  return hf_name(*m, family);
}

void unpermute_qk_rows(std::span<const float> in, std::span<float> out, int64_t n_head,
                       int64_t rows, int64_t cols) {
  const int64_t hd = rows / n_head, half = hd / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t s = 0; s < 2; ++s) {
        const float* src = in.data() + (h * hd + 2 * j + s) * cols;
        std::copy(src, src + cols, out.data() + (h * hd + s * half + j) * cols);
      }
}

DType gguf_default_dtype(const GgufFile& f) {
  bool bf16 = false, f16 = false;
  for (const auto& t : f.tensors()) {
    if (t.type_name == "BF16") {
      bf16 = true;
    } else if (t.type_name == "F16") {
      f16 = true;
    } else if (t.type_name != "F32") {
      return DType::kF32;
    }
  }
  return bf16 ? DType::kBF16 : f16 ? DType::kF16 : DType::kF32;
}

Result<GgufGeometry> gguf_geometry(const GgufFile& f) {
  GgufGeometry g;
  TQ_TRY(auto arch, f.get_string("general.architecture"));
  if (!arch) return err("{}: missing metadata 'general.architecture'", f.path());
  g.arch = std::string(*arch);
  if (g.arch == "llama") {
    g.family = Family::kLlama;
  } else if (g.arch == "qwen2") {
    g.family = Family::kQwen2;
  } else if (g.arch == "qwen3") {
    g.family = Family::kQwen3;
  } else {
    return err("{}: architecture '{}' is not supported (supported: llama, qwen2, qwen3)", f.path(),
               g.arch);
  }
  const std::string p = g.arch + ".";
  TQ_TRY(g.n_layers, require_int(f, p + "block_count"));
  TQ_TRY(g.hidden, require_int(f, p + "embedding_length"));
  TQ_TRY(g.n_head, require_int(f, p + "attention.head_count"));
  TQ_TRY(auto kv, f.get_int(p + "attention.head_count_kv"));
  g.n_kv_head = kv.value_or(g.n_head);
  if (g.n_layers <= 0 || g.hidden <= 0 || g.n_head <= 0 || g.n_kv_head <= 0 ||
      g.n_head % g.n_kv_head != 0)
    return err("{}: bad geometry: {} layers, hidden {}, {} heads, {} kv heads", f.path(),
               g.n_layers, g.hidden, g.n_head, g.n_kv_head);
  TQ_TRY(auto key_len, f.get_int(p + "attention.key_length"));
  g.head_dim = key_len.value_or(g.hidden / g.n_head);
  if (g.head_dim <= 0 || g.head_dim % 2 != 0)
    return err("{}: bad head_dim {}", f.path(), g.head_dim);
  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr || embd->ne.size() != 2)
    return err("{}: missing 2-D tensor 'token_embd.weight'", f.path());
  g.vocab = embd->ne[1];
  g.permuted_qk = g.family == Family::kLlama;
  g.tied = f.find_tensor("output.weight") == nullptr;
  return g;
}

Result<nlohmann::json> gguf_hf_config(const GgufFile& f, DType dtype) {
  TQ_TRY(GgufGeometry g, gguf_geometry(f));
  const std::string p = g.arch + ".";
  nlohmann::json c;
  static constexpr std::string_view kArchitectures[] = {"LlamaForCausalLM", "Qwen2ForCausalLM",
                                                        "Qwen3ForCausalLM"};
  c["architectures"] =
      nlohmann::json::array({std::string(kArchitectures[static_cast<int>(g.family)])});
  c["model_type"] = g.arch;
  c["hidden_size"] = g.hidden;
  c["num_hidden_layers"] = g.n_layers;
  c["num_attention_heads"] = g.n_head;
  c["num_key_value_heads"] = g.n_kv_head;
  c["head_dim"] = g.head_dim;
  c["vocab_size"] = g.vocab;
  c["tie_word_embeddings"] = g.tied;
  c["hidden_act"] = "silu";
  c["torch_dtype"] = dtype_torch_name(dtype);

  TQ_TRY(auto ffn, f.get_int(p + "feed_forward_length"));
  if (!ffn) {
    const GgufTensorInfo* gate = f.find_tensor("blk.0.ffn_gate.weight");
    if (gate == nullptr || gate->ne.size() != 2)
      return err("{}: missing metadata '{}feed_forward_length'", f.path(), p);
    ffn = gate->ne[1];
  }
  c["intermediate_size"] = *ffn;
  TQ_TRY(auto eps, f.get_float(p + "attention.layer_norm_rms_epsilon"));
  if (!eps) return err("{}: missing metadata '{}attention.layer_norm_rms_epsilon'", f.path(), p);
  c["rms_norm_eps"] = tidy_f32(*eps);
  TQ_TRY(auto theta, f.get_float(p + "rope.freq_base"));
  double rope_theta = theta ? tidy_f32(*theta) : 10000.0;
  c["rope_theta"] = rope_theta;
  TQ_TRY(auto ctx, f.get_int(p + "context_length"));
  if (ctx)
    c["max_position_embeddings"] = *ctx;
  else if (g.family == Family::kQwen3)
    return err("{}: missing metadata '{}context_length'", f.path(), p);

  if (g.family == Family::kLlama) {
    c["attention_bias"] = f.find_tensor("blk.0.attn_q.bias") != nullptr;
    c["mlp_bias"] = f.find_tensor("blk.0.ffn_gate.bias") != nullptr;
  }

  // rope_scaling: explicit GGUF keys, or llama3's rope_freqs tensor.
  TQ_TRY(auto stype, f.get_string(p + "rope.scaling.type"));
  TQ_TRY(auto sfactor, f.get_float(p + "rope.scaling.factor"));
  TQ_TRY(auto sorig, f.get_int(p + "rope.scaling.original_context_length"));
  nlohmann::json scaling = nullptr;
  if (stype && *stype != "none") {
    if (*stype != "linear" && *stype != "yarn")
      return err("{}: rope scaling type '{}' is not supported", f.path(), *stype);
    if (!sfactor) return err("{}: rope scaling '{}' without a factor", f.path(), *stype);
    scaling = {{"rope_type", *stype}, {"type", *stype}, {"factor", tidy_f32(*sfactor)}};
    if (sorig) scaling["original_max_position_embeddings"] = *sorig;
  } else if (const GgufTensorInfo* rf = f.find_tensor("rope_freqs.weight")) {
    TQ_TRY(auto rope_dim, f.get_int(p + "rope.dimension_count"));
    TQ_TRY(scaling, llama3_rope_scaling(f, *rf, rope_theta, rope_dim.value_or(g.head_dim)));
  }
  c["rope_scaling"] = scaling;

  TQ_TRY(auto bos, f.get_int("tokenizer.ggml.bos_token_id"));
  TQ_TRY(auto eos, f.get_int("tokenizer.ggml.eos_token_id"));
  if (bos) c["bos_token_id"] = *bos;
  if (eos) c["eos_token_id"] = *eos;
  return c;
}

Result<std::unique_ptr<GgufTensorSource>> GgufTensorSource::open(const std::string& path) {
  TQ_TRY(GgufFile f, GgufFile::open(path));
  return create(std::make_shared<const GgufFile>(std::move(f)));
}

Result<std::unique_ptr<GgufTensorSource>> GgufTensorSource::create(
    std::shared_ptr<const GgufFile> file) {
  const GgufFile& f = *file;
  TQ_TRY(GgufGeometry geo, gguf_geometry(f));
  std::unique_ptr<GgufTensorSource> src(new GgufTensorSource());
  src->file_ = std::move(file);
  src->geo_ = geo;

  std::vector<std::pair<TensorInfo, Entry>> rows;
  for (const auto& t : f.tensors()) {
    if (std::find(std::begin(kDerivedTensors), std::end(kDerivedTensors), t.name) !=
        std::end(kDerivedTensors))
      continue;
    auto m = lookup(t.name);
    std::optional<std::string> name = m ? hf_name(*m, geo.family) : std::nullopt;
    if (!name)
      return err("{}: tensor '{}' has no Hugging Face name in a {} checkpoint (not supported)",
                 f.path(), t.name, geo.arch);
    if (m->layer >= geo.n_layers)
      return err("{}: tensor '{}' is past block_count {}", f.path(), t.name, geo.n_layers);
    Entry e{&t, 0};
    if (geo.permuted_qk && m->rule->qk != QkRole::kNone) {
      e.permute_heads = m->rule->qk == QkRole::kQ ? geo.n_head : geo.n_kv_head;
      int64_t rows_n = t.ne.size() >= 2 ? t.ne[1] : t.ne.empty() ? 1 : t.ne[0];
      if (rows_n % (2 * e.permute_heads) != 0)
        return err("{}: tensor '{}' has {} rows, not a multiple of 2 x {} heads", f.path(), t.name,
                   rows_n, e.permute_heads);
    }
    TensorInfo info;
    info.name = std::move(*name);
    info.shape = t.shape();
    info.storage = std::string(t.type_name);
    info.stored_dtype = stored_dtype_of(t);
    info.stored_bytes = t.nbytes;
    rows.emplace_back(std::move(info), e);
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first.name < b.first.name; });
  for (auto& [info, e] : rows) {
    src->infos_.push_back(std::move(info));
    src->entries_.push_back(e);
  }
  // Every tensor the geometry implies, with its shape, exactly as an HF checkpoint would have.
  TQ_TRY(nlohmann::json cj, gguf_hf_config(f, DType::kF32));
  TQ_TRY(src->config_, parse_model_config(cj, f.path()));
  TQ_CHECK_OK(check_tensors_against_config(src->config_, *src));
  return src;
}

const GgufTensorInfo* GgufTensorSource::gguf_tensor(const std::string& name) const {
  const TensorInfo* info = find(name);
  return info == nullptr ? nullptr : entries_[info - infos_.data()].gguf;
}

Result<FloatTensor> GgufTensorSource::load_f32(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) return err("{}: no tensor '{}'", path(), name);
  const Entry& e = entries_[info - infos_.data()];
  TQ_TRY(FloatTensor t, file_->load_f32(*e.gguf));
  if (e.permute_heads == 0) return t;
  // [rows, cols] (a bias is [rows] with cols = 1).
  int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  int64_t cols = rows == 0 ? 0 : static_cast<int64_t>(t.data.size()) / rows;
  std::vector<float> out(t.data.size());
  unpermute_qk_rows(t.data, out, e.permute_heads, rows, cols);
  t.data = std::move(out);
  return t;
}

Result<std::optional<MlxQuantBytes>> GgufTensorSource::load_mlx_quant(
    const std::string& name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) return err("{}: no tensor '{}'", path(), name);
  const Entry& e = entries_[info - infos_.data()];
  if (!ggml_mlx_spec(e.gguf->type_id) || info->shape.size() != 2)
    return std::optional<MlxQuantBytes>{};
  const int64_t rows = info->shape[0], cols = info->shape[1];
  std::span<const uint8_t> bytes = file_->tensor_bytes(*e.gguf);
  std::vector<uint8_t> rows_in_hf_order;
  if (e.permute_heads != 0) {  // whole rows of blocks move, as unpermute_qk_rows moves floats
    const size_t row = bytes.size() / static_cast<size_t>(rows);
    rows_in_hf_order.resize(bytes.size());
    const int64_t hd = rows / e.permute_heads, half = hd / 2;
    for (int64_t h = 0; h < e.permute_heads; ++h)
      for (int64_t j = 0; j < half; ++j)
        for (int64_t s = 0; s < 2; ++s)
          std::copy_n(bytes.data() + (h * hd + 2 * j + s) * row, row,
                      rows_in_hf_order.data() + (h * hd + s * half + j) * row);
    bytes = rows_in_hf_order;
  }
  auto q = ggml_to_mlx(e.gguf->type_id, bytes, rows, cols);
  if (!q) return std::optional<MlxQuantBytes>{};  // e.g. a bias outside f16: f32 instead
  return std::optional<MlxQuantBytes>(std::move(q).value());
}

}  // namespace tq
