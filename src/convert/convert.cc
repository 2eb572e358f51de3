#include "convert/convert.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "io/staging_dir.h"

namespace tq {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Result<std::string> dump_json(const json& j, int indent, const std::string& what) {
  try {
    return j.dump(indent) + "\n";
  } catch (const json::exception& e) {
    return err("{}: cannot encode: {}", what, e.what());
  }
}

Result<Recipe> resolve_recipe(const ConvertOptions& o, const ModelConfig& cfg) {
  const std::string& r = o.recipe;
  if (!is_recipe_preset(r)) return load_recipe_file(r);
  if (o.plan.mode && *o.plan.mode != QuantMode::kAffine)
    return err("--recipe {} is affine only (as in mlx-lm); drop --mode {}", r,
               quant_mode_name(*o.plan.mode));
  if (o.plan.bits)
    return err("--recipe {} sets the bits of every module; drop --bits {}", r, *o.plan.bits);
  return preset_recipe(r, cfg.num_hidden_layers, o.plan.group_size.value_or(64));
}

struct Group {
  int64_t layer = -1;
  std::string what;
  std::vector<const PlanEntry*> entries;
};

// Globals, then one group per decoder layer. Without transforms each global is its own group
// (the embedding and an untied head are the largest tensors); transforms see all globals at once.
std::vector<Group> make_groups(const QuantPlan& plan, bool together) {
  std::vector<Group> before, layers(static_cast<size_t>(plan.config.num_hidden_layers)), after;
  bool seen_layer = false;
  Group all_globals{-1, "globals", {}};
  for (const auto& e : plan.entries) {
    if (e.layer >= 0) {
      seen_layer = true;
      Group& g = layers[static_cast<size_t>(e.layer)];
      g.layer = e.layer;
      g.entries.push_back(&e);
      continue;
    }
    if (together) {
      all_globals.entries.push_back(&e);
    } else {
      (seen_layer ? after : before).push_back(Group{-1, e.name, {&e}});
    }
  }
  std::vector<Group> out;
  if (together && !all_globals.entries.empty()) out.push_back(std::move(all_globals));
  for (auto& g : before) out.push_back(std::move(g));
  const size_t n = layers.size();
  for (size_t i = 0; i < n; ++i) {
    layers[i].what = fmt::format("layer {}/{}", i + 1, n);
    out.push_back(std::move(layers[i]));
  }
  for (auto& g : after) out.push_back(std::move(g));
  return out;
}

// The source's row for a plan entry: the same tensor in the source's layout (qwen3_5's Hugging
// Face names when the output is mlx-lm's), or null for an entry with no table row.
const TensorKind* source_row(const ModelSource& src, const PlanEntry& e) {
  return e.kind != nullptr ? same_tensor(table_for(src.config), *e.kind) : nullptr;
}

std::string source_name(const ModelSource& src, const PlanEntry& e) {
  const TensorKind* k = source_row(src, e);
  return k != nullptr ? tensor_name(*k, e.layer) : e.name;
}

Status cancelled(const ConvertOptions& o) {
  if (o.cancel && o.cancel->load()) return err("{}: interrupted; nothing was written", o.dest);
  return ok_status();
}

}  // namespace

DType default_output_dtype(const ModelSource& src) {
  if (src.kind == SourceKind::kGguf) return DType::kBF16;
  std::string embed = "model.embed_tokens.weight";
  for (const TensorKind& k : table_for(src.config))
    if (k.role == TensorRole::kEmbed) embed = tensor_name(k, -1);
  const TensorInfo* e = src.tensors->find(embed);
  DType d = e ? e->stored_dtype : DType::kF32;
  if (d == DType::kBF16 || d == DType::kF16 || d == DType::kF32) return d;
  return DType::kF32;
}

DType default_quantized_dtype(const ModelSource& src) {
  return default_output_dtype(src) == DType::kF16 ? DType::kF16 : DType::kBF16;
}

Result<ConvertJob> prepare_convert(const ConvertOptions& opts,
                                   std::vector<WeightTransform*> transforms) {
  ConvertJob job;
  TQ_TRY(job.source, open_model(opts.source));
  if (!opts.origin.empty()) {
    TQ_TRY(job.origin, open_model(opts.origin));
  }
  job.config = job.source.config_json;
  job.config.erase("quantization");  // re-quantizing an MLX source starts from its float values
  job.config.erase("quantization_config");
  for (WeightTransform* t : transforms) TQ_CHECK_OK(t->edit_config(job.config));
  TQ_TRY(ModelConfig cfg, parse_model_config(job.config, opts.source + " (output config)"));
  cfg.has_mtp = job.source.config.has_mtp;  // the names said so; written as a companion file
  PlanOptions po = opts.plan;
  po.dtype = opts.dtype.value_or(default_output_dtype(job.recorded_source()));
  if (!opts.recipe.empty()) {
    TQ_TRY(po.recipe, resolve_recipe(opts, cfg));
  }
  TQ_TRY(job.plan, build_plan(cfg, po));
  if (opts.dtype) {
    job.dtype_reason = "given by --dtype";
  } else if (job.plan.any_quantized()) {
    // f32 scales double the per-group cost; quantized outputs take 16-bit floats.
    job.plan.dtype = default_quantized_dtype(job.recorded_source());
    job.dtype_reason = "default for quantized output";
  } else {
    job.dtype_reason = job.source.kind == SourceKind::kGguf ? "default for a GGUF source"
                                                            : "the source's float dtype";
  }
  if (transforms.empty()) {
    for (const auto& e : job.plan.entries)
      if (!job.source.tensors->find(source_name(job.source, e)))
        return err("{}: tensor '{}' is missing", opts.source, source_name(job.source, e));
  }
  job.transforms = std::move(transforms);
  return job;
}

Result<ConvertSummary> run_convert(ConvertJob& job, LayerQuantizer& quantizer,
                                   const ConvertOptions& opts) {
  const auto t_start = Clock::now();
  const QuantPlan& plan = job.plan;
  const TensorSource& src = *job.source.tensors;

  // Everything that can fail without tensor data fails before the staging directory exists.
  TQ_TRY(std::string fingerprint, source_fingerprint(job.recorded_source()));
  TQ_TRY(NamedFiles tok_files, job.source.tensors->tokenizer_files());
  TQ_TRY(std::string config_text, dump_json(output_config(job), 4, opts.dest + "/config.json"));
  // The model's tensors, and the MTP companion's (qwen3_5) for mtp.safetensors beside them:
  // mlx-lm loads model*.safetensors only, and our index does not list the companion.
  std::vector<TensorDecl> decls, companion_decls;
  std::set<std::string> companion_names;
  for (const PlanEntry& e : plan.entries)
    if (e.kind != nullptr && e.kind->companion())
      for (const char* part : {".weight", ".scales", ".biases"})
        companion_names.insert(e.module + part), companion_names.insert(e.name);
  for (TensorDecl& d : plan.stored_tensors())
    (companion_names.count(d.name) ? companion_decls : decls).push_back(std::move(d));
  uint64_t out_total = 0;
  for (const auto& d : decls) out_total += d.nbytes();
  for (const auto& d : companion_decls) out_total += d.nbytes();
  TQ_CHECK_OK(cancelled(opts));

  std::optional<StagingDir> stage;
  std::unique_ptr<ShardedWriter> writer, companion;
  if (opts.write_output) {
    TQ_TRY(StagingDir made, StagingDir::create(opts.dest, opts.force));
    stage.emplace(std::move(made));
    ShardedWriterOptions wo;
    wo.max_shard_bytes = opts.max_shard_bytes;
    if (!companion_decls.empty()) {
      ShardedWriterOptions co = wo;
      co.stem = "mtp";
      co.write_index = false;
      TQ_TRY(companion, ShardedWriter::create(stage->path(), companion_decls, co));
    }
    TQ_TRY(writer, ShardedWriter::create(stage->path(), decls, wo));
  }
  auto write = [&](const std::string& name, std::span<const uint8_t> bytes) -> Status {
    return (companion_names.count(name) ? *companion : *writer).write(name, bytes);
  };

  const std::vector<Group> groups = make_groups(plan, !job.transforms.empty());
  ConvertProgress prog;
  prog.steps = static_cast<int64_t>(groups.size());
  prog.bytes_out_total = out_total;
  json module_info = json::object();
  // Quantized modules not returned yet: a quantizer may return one in a later group (GPTQ's
  // head waits for the activations after the last layer).
  std::map<std::string, std::pair<QuantSpec, Shape>> pending;
  const auto t_apply = Clock::now();
  // The source may store the family in another layout (qwen3_5: Hugging Face's): each plan
  // entry is read from its row of the source's table and re-expressed in the output's.
  for (const Group& g : groups) {
    TQ_CHECK_OK(cancelled(opts));
    TensorMap m;
    for (const PlanEntry* e : g.entries) {
      const TensorKind* sk = source_row(job.source, *e);
      const std::string sname = source_name(job.source, *e);
      if (!src.find(sname)) continue;  // a transform must create it (checked below)
      TQ_TRY(FloatTensor t, src.load_f32(sname));
      if (sk != nullptr && sk != e->kind) TQ_CHECK_OK(change_layout(*sk, *e->kind, e->shape, t));
      prog.bytes_in += t.data.size() * sizeof(float);
      m.emplace(e->name, std::move(t));
    }
    for (WeightTransform* t : job.transforms)
      TQ_CHECK_OK(g.layer < 0 ? t->apply_globals(m) : t->apply_layer(g.layer, m));
    std::map<std::string, QuantSpec> specs;
    for (const PlanEntry* e : g.entries) {
      auto it = m.find(e->name);
      if (it == m.end()) return err("{}: tensor '{}' is missing", opts.source, e->name);
      if (it->second.shape != e->shape ||
          it->second.data.size() != static_cast<size_t>(shape_numel(e->shape)))
        return err("{}: tensor '{}' has shape {}, the plan expects {}", opts.source, e->name,
                   shape_str(it->second.shape), shape_str(e->shape));
      if (e->spec) specs.emplace(e->name, *e->spec);
    }
    if (m.size() != g.entries.size()) {
      for (const auto& kv : m) {
        const std::string& name = kv.first;  // clang 14 cannot capture a structured binding
        if (std::none_of(g.entries.begin(), g.entries.end(),
                         [&](const PlanEntry* e) { return e->name == name; }))
          return err("{}: a transform produced tensor '{}', which the plan does not hold",
                     opts.source, name);
      }
    }
    {
      // Called for every group, in model order, even one with nothing to quantize: a stateful
      // quantizer (GPTQ) follows the float model through embed, layers, norm and head.
      for (const auto& [name, spec] : specs)
        pending.emplace(name, std::pair{spec, m.at(name).shape});
      TQ_TRY(std::vector<QuantizedModule> mods, quantizer.quantize(g.layer, m, specs, plan.dtype));
      for (QuantizedModule& q : mods) {
        auto it = pending.find(q.name + ".weight");
        if (it == pending.end() || q.spec != it->second.first || q.shape != it->second.second)
          return err("quantizer returned module '{}' ({}), which the plan does not hold", q.name,
                     quant_spec_str(q.spec));
        if (writer) {
          TQ_CHECK_OK(write(q.name + ".weight", q.weight));
          TQ_CHECK_OK(write(q.name + ".scales", q.scales));
          if (quant_mode_has_biases(q.spec.mode)) TQ_CHECK_OK(write(q.name + ".biases", q.biases));
          prog.bytes_out += q.weight.size() + q.scales.size() + q.biases.size();
          if (!q.info.is_null()) module_info[q.name] = std::move(q.info);
        }
        m.erase(it->first);
        pending.erase(it);
        q = QuantizedModule{};  // free as we go
      }
    }
    for (const PlanEntry* e : g.entries) {
      if (e->spec || !writer) continue;
      std::vector<uint8_t> bytes = encode_from_f32(m.at(e->name).data, plan.float_dtype(*e));
      TQ_CHECK_OK(write(e->name, bytes));
      prog.bytes_out += bytes.size();
      m.erase(e->name);
    }
    ++prog.step;
    prog.what = g.what;
    prog.elapsed_s = seconds_since(t_start);
    if (opts.progress) opts.progress(prog);
  }
  if (writer && !pending.empty())  // (a rank that writes nothing gets no modules back)
    return err("the quantizer never returned module '{}' of the plan", pending.begin()->first);
  const double apply_s = seconds_since(t_apply);
  if (!writer) return ConvertSummary{};
  const auto t_write = Clock::now();
  TQ_CHECK_OK(writer->finish());
  if (companion) TQ_CHECK_OK(companion->finish());

  SizeStats size = plan.size();
  json transforms = json::array();
  for (const WeightTransform* t : job.transforms) transforms.push_back(t->metadata());
  json meta = {
      {"tool", "tq"},
      {"version", TQ_VERSION},
      {"command", "convert"},
      {"source",
       {{"path", job.recorded_source().path},
        {"kind", source_kind_name(job.recorded_source().kind)},
        {"bytes", job.recorded_source().file_bytes},
        {"fingerprint", fingerprint},
        {"fingerprint_method",
         "sha256 of kind, config, file names and sizes, first 1 MiB, 16 x 64 KiB samples and "
         "last 64 KiB of each weight file"}}},
      {"options", opts.options_record},
      {"dtype", dtype_name(plan.dtype)},
      {"dtype_reason", job.dtype_reason},
      {"quantization", plan.quantization_json()},
      {"modules", plan.modules_json()},
      {"module_info", module_info},
      {"transforms", transforms},
      {"quantizer", quantizer.metadata()},
      {"size", {{"params", size.params}, {"bytes", size.bytes}, {"bpw", size.bpw}}},
  };
  for (const auto& [key, value] : opts.extra_metadata.items()) meta[key] = value;
  TQ_CHECK_OK(stage->write_file("config.json", config_text));
  for (const auto& [name, text] : tok_files) TQ_CHECK_OK(stage->write_file(name, text));
  for (const WeightTransform* t : job.transforms) {
    TQ_TRY(auto sidecars, t->sidecar_files());
    for (const auto& [name, bytes] : sidecars) TQ_CHECK_OK(stage->write_file(name, bytes));
  }
  if (opts.record_timings)
    meta["timings"] = {{"apply_s", apply_s},
                       {"finish_s", seconds_since(t_write)},
                       {"total_s", seconds_since(t_start)}};
  TQ_TRY(std::string meta_text, dump_json(meta, 2, opts.dest + "/tq_metadata.json"));
  TQ_CHECK_OK(stage->write_file("tq_metadata.json", meta_text));
  TQ_CHECK_OK(cancelled(opts));
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(stage->path(), ec), end; !ec && it != end; it.increment(ec))
    files.push_back(it->path().filename().string());
  std::sort(files.begin(), files.end());
  TQ_CHECK_OK(stage->publish());

  ConvertSummary s;
  s.dest = opts.dest;
  s.size = size;
  s.files = std::move(files);
  s.seconds = seconds_since(t_start);
  s.bytes_in = prog.bytes_in;
  return s;
}

}  // namespace tq
