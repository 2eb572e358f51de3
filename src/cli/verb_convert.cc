// tq convert SRC -o DST: quantize a checkpoint into the MLX layout stock mlx-lm loads.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/verb.h"
#include "convert/allocate_convert.h"
#include "convert/convert.h"
#include "convert/convert_db.h"
#include "convert/rtn_quantizer.h"

namespace tq::cli {
namespace {

struct ConvertArgs {
  std::string src, out;
  std::optional<int> bits, group_size;
  std::string mode, dtype, recipe, max_shard = "5GiB";
  std::vector<std::string> keep_float;
  bool dry_run = false, force = false, json = false, no_timings = false;
  std::optional<double> target_bpw;
  std::string target_size, sensitivity, db;
  bool allow_over = false, no_db = false;
};

std::atomic<bool> g_interrupted{false};

extern "C" void on_signal(int) { g_interrupted.store(true); }

// "5GiB", "500MB", "123456" -> bytes.
Result<uint64_t> parse_size(const std::string& s, const char* flag = "--max-shard-size") {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    return err("{} '{}': expected a size such as 5GiB, 500MB or 1000000", flag, s);
  }
  std::string unit = s.substr(pos);
  const std::pair<const char*, double> units[] = {
      {"", 1},       {"B", 1},         {"KB", 1e3},         {"MB", 1e6},
      {"GB", 1e9},   {"KiB", 1024.0},  {"MiB", 1048576.0},  {"GiB", 1073741824.0},
      {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0},
  };
  for (const auto& [name, mult] : units)
    if (unit == name && v > 0 && v * mult < 1.8e19) return static_cast<uint64_t>(v * mult);
  return err("{} '{}': expected a positive size such as 5GiB, 500MB or 1000000", flag, s);
}

nlohmann::json options_record(const ConvertArgs& a) {
  nlohmann::json o = {
      {"bits", a.bits ? nlohmann::json(*a.bits) : nlohmann::json()},
      {"group_size", a.group_size ? nlohmann::json(*a.group_size) : nlohmann::json()},
      {"mode", a.mode},
      {"dtype", a.dtype},
      {"keep_float", a.keep_float},
      {"recipe", a.recipe},
      {"max_shard_size", a.max_shard}};
  if (a.target_bpw) o["target_bpw"] = *a.target_bpw;
  if (!a.target_size.empty()) o["target_size"] = a.target_size;
  if (!a.sensitivity.empty()) o["sensitivity"] = a.sensitivity;
  if (a.allow_over) o["allow_over"] = true;
  return o;
}

class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool enabled) : enabled_(enabled), tty_(::isatty(2) == 1) {}
  void operator()(const ConvertProgress& p) {
    if (!enabled_) return;
    double mbs = p.elapsed_s > 0 ? p.bytes_in / 1e6 / p.elapsed_s : 0.0;
    double f = p.bytes_out_total ? double(p.bytes_out) / double(p.bytes_out_total) : 0.0;
    double eta = f > 0 ? p.elapsed_s * (1 - f) / f : 0.0;
    if (tty_) {
      std::fprintf(stderr, "\r\033[Ktq convert: %s (%lld/%lld)  %.1f MB/s  ETA %.0f s",
                   p.what.c_str(), static_cast<long long>(p.step), static_cast<long long>(p.steps),
                   mbs, eta);
      if (p.step == p.steps) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "tq convert: [%lld/%lld] %s  %.1f MB/s  ETA %.0f s\n",
                   static_cast<long long>(p.step), static_cast<long long>(p.steps), p.what.c_str(),
                   mbs, eta);
    }
  }

 private:
  bool enabled_, tty_;
};

Status run_convert_verb(const ConvertArgs& a) {
  ConvertOptions o;
  o.source = a.src;
  o.dest = a.out;
  o.force = a.force;
  o.record_timings = !a.no_timings;
  o.recipe = a.recipe;
  o.plan.bits = a.bits;
  o.plan.group_size = a.group_size;
  o.plan.keep_float = a.keep_float;
  if (!a.mode.empty()) {
    auto m = quant_mode_from_name(a.mode);
    if (!m) return err("--mode {}: expected affine, mxfp4, nvfp4 or mxfp8", a.mode);
    o.plan.mode = *m;
  }
  if (a.dtype == "f32") o.dtype = DType::kF32;
  if (a.dtype == "f16") o.dtype = DType::kF16;
  if (a.dtype == "bf16") o.dtype = DType::kBF16;
  TQ_TRY(o.max_shard_bytes, parse_size(a.max_shard));
  o.options_record = options_record(a);
  if (!a.dry_run && a.out.empty()) return err("-o/--output DST is required (or --dry-run)");

  const bool allocating = a.target_bpw || !a.target_size.empty();
  if (!allocating && (!a.sensitivity.empty() || a.allow_over))
    return err("--sensitivity/--allow-over only apply with --target-bpw or --target-size");
  if (allocating && (a.bits || !a.mode.empty() || a.group_size))
    return err(
        "--target-bpw/--target-size choose each module's spec from the sensitivity "
        "table; drop --bits/--mode/--group-size (pin modules with a recipe instead)");
  TQ_TRY(ConvertJob job, prepare_convert(o));
  nlohmann::json allocation;  // null unless allocating
  std::optional<AllocateOutcome> alloc;
  if (allocating) {
    AllocateRequest req;
    req.target_bpw = a.target_bpw.value_or(0);
    if (!a.target_size.empty()) {
      TQ_TRY(req.target_bytes, parse_size(a.target_size, "--target-size"));
    }
    req.allow_over = a.allow_over;
    req.sensitivity = a.sensitivity;
    TQ_TRY(alloc, allocate_convert_plan(job, req));
    allocation = alloc->record;
    o.extra_metadata["allocation"] = allocation;
  }
  SizeStats plan_size = job.plan.size();
  if (a.dry_run) {
    if (a.json) {
      nlohmann::json j = {{"dry_run", true},
                          {"source", job.source.path},
                          {"params", plan_size.params},
                          {"bytes", plan_size.bytes},
                          {"bpw", plan_size.bpw},
                          {"dtype", dtype_name(job.plan.dtype)},
                          {"quantization", job.plan.quantization_json()},
                          {"modules", job.plan.modules_json()}};
      if (alloc) j["allocation"] = allocation;
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      for (const auto& line : describe_plan(job)) std::printf("%s\n", line.c_str());
      if (alloc)
        std::printf(
            "allocation: target %s, achieved %.4f bpw, predicted summed KL %.6g nats "
            "(%d modules allocated, %d pinned)\n",
            a.target_bpw ? fmt::format("{} bpw", *a.target_bpw).c_str()
                         : (a.target_size + " bytes").c_str(),
            plan_size.bpw, alloc->plan.predicted_kl, alloc->free_modules, alloc->pinned_modules);
    }
    return ok_status();
  }

  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  o.cancel = &g_interrupted;
  ProgressPrinter printer(true);
  o.progress = [&printer](const ConvertProgress& p) { printer(p); };
  std::fprintf(stderr, "tq convert: %s -> %s (%s, %.4f bpw, %llu bytes)\n", a.src.c_str(),
               a.out.c_str(), quant_spec_str(job.plan.global).c_str(), plan_size.bpw,
               static_cast<unsigned long long>(plan_size.bytes));
  RtnQuantizer rtn;
  TQ_TRY(ConvertSummary s, run_convert(job, rtn, o));
  if (a.json) {
    nlohmann::json j = {{"dest", s.dest},
                        {"params", s.size.params},
                        {"bytes", s.size.bytes},
                        {"bpw", s.size.bpw},
                        {"seconds", s.seconds},
                        {"files", s.files},
                        {"bytes_in_f32", s.bytes_in}};
    std::printf("%s\n", j.dump(2).c_str());
  }
  std::fprintf(stderr, "tq convert: wrote %s in %.1f s\n", a.out.c_str(), s.seconds);
  if (!a.no_db) {
    // The artifact is published: a database problem is a warning, not a failed conversion.
    Status st = record_convert_run(a.db, job, s, allocation);
    if (!st.ok())
      std::fprintf(stderr, "tq convert: warning: not recorded in the results database: %s\n",
                   st.error().message.c_str());
  }
  return ok_status();
}

const bool kRegistered = register_verb({
    "convert",
    "Quantize a checkpoint (HF dir, MLX dir or GGUF) into an MLX directory mlx-lm loads",
    30,
    [](CLI::App& app) -> VerbRun {
      auto a = std::make_shared<ConvertArgs>();
      app.add_option("source", a->src, "HF or MLX safetensors directory, or a GGUF file")
          ->required();
      app.add_option("-o,--output", a->out, "output directory (published atomically)");
      app.add_option("--bits", a->bits, "bits per weight (affine: 1-6 or 8; default 4)");
      app.add_option("--group-size", a->group_size,
                     "weights per scale (affine: 32, 64 or 128; default 64; fp modes fixed)");
      app.add_option("--mode", a->mode, "affine (default), mxfp4, nvfp4 or mxfp8");
      app.add_option("--dtype", a->dtype,
                     "float tensors and affine scales: f32, f16 or bf16 (default: the source's "
                     "float dtype; bf16 for GGUF)")
          ->check(CLI::IsMember({"f32", "f16", "bf16"}));
      app.add_option("--keep-float", a->keep_float,
                     "keep matching modules float: glob on the module path, re:REGEX or "
                     "role:NAME (repeatable)");
      app.add_option("--recipe", a->recipe,
                     "recipe JSON file, or a preset: mixed_2_6, mixed_3_4, mixed_3_6, mixed_4_6");
      app.add_flag("--dry-run", a->dry_run,
                   "print the per-module plan, bpw and output bytes; write nothing");
      app.add_option("--max-shard-size", a->max_shard,
                     "largest safetensors shard (default 5GiB; e.g. 500MB, 2GiB)");
      app.add_flag("--force", a->force,
                   "replace an existing DST (only once the new one is complete)");
      app.add_flag("--json", a->json, "print a JSON summary on stdout");
      app.add_option("--target-bpw", a->target_bpw,
                     "allocate each module's spec from --sensitivity to this bits per weight");
      app.add_option("--target-size", a->target_size,
                     "allocate to this whole-model size (e.g. 90MB, 1.5GiB) instead");
      app.add_option("--sensitivity", a->sensitivity,
                     "sensitivity.json from `tq sensitivity` (required with a target)");
      app.add_flag("--allow-over", a->allow_over,
                   "the allocation may exceed the target by up to 0.02 bpw");
      app.add_option("--db", a->db,
                     "Results database (default: $XDG_DATA_HOME/turboquant/results.sqlite)");
      app.add_flag("--no-db", a->no_db, "Do not record the artifact in the results database");
      app.add_flag("--no-timings", a->no_timings,
                   "leave timings out of tq_metadata.json (byte-identical reruns)");
      return [a]() { return run_convert_verb(*a); };
    },
});

}  // namespace
}  // namespace tq::cli
