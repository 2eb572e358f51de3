// tq convert SRC -o DST: quantize a checkpoint into the MLX layout stock mlx-lm loads.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/byte_size.h"
#include "base/comm.h"
#include "cli/convert_gptq.h"
#include "cli/convert_scale.h"
#include "cli/db_flags.h"
#include "cli/distill_progress.h"
#include "cli/sensitivity_progress.h"
#include "cli/verb.h"
#include "convert/allocate_convert.h"
#include "convert/convert.h"
#include "convert/convert_db.h"
#include "convert/fold_float.h"
#include "convert/patched_checkpoint.h"
#include "convert/sensitivity_run.h"
#include "eval/results_db.h"
#include "io/checkpoint_dir.h"
#include "io/staging_dir.h"
#include "model/model_tokenizer.h"
#include "quant/distill.h"
#include "quant/rtn_quantizer.h"
#include "rotate/rotation.h"
#include "rotate/rotation_transform.h"

namespace tq::cli {
namespace {

namespace fs = std::filesystem;

struct ConvertArgs {
  std::string src, out;
  std::optional<int> bits, group_size;
  std::string mode, dtype, recipe, max_shard = "5GiB", grid, preset;
  std::vector<std::string> keep_float;
  bool dry_run = false, force = false, json = false, no_timings = false;
  std::optional<double> target_bpw;
  std::string target_size, sensitivity;
  bool allow_over = false;
  DbFlags db;
  GptqArgs gptq;
  bool no_quantize = false;
  // --rotate-weights and its options
  bool rotate = false, save_rotations = false;
  std::string channel_scale;               // on, off, or "" (on under --preset best below 4 bits)
  std::string r1, r2, fold_dtype = "f32";  // r1 "": hadamard, or the preset's choice
  uint64_t seed = 0;
  std::optional<int64_t> distill;  // --distill steps (0: off)
  int64_t distill_seq_len = kDistillSeqLen;
};

std::atomic<bool> g_interrupted{false};

// --preset best's --distill: a new 256-token calibration row per step; 160 keeps the 3.5-bpw
// SmolLM2 preset within 20 minutes on 2 cores (bench/README.md, "Distilled scales and biases").
constexpr int64_t kPresetDistillSteps = 160;

extern "C" void on_signal(int) { g_interrupted.store(true); }

// A shard or a target of zero bytes means nothing; the parser itself accepts 0.
Result<uint64_t> positive_size(const std::string& s, const char* flag) {
  TQ_TRY(uint64_t n, parse_byte_size(s, flag));
  if (n == 0) return err("{} '{}': expected a positive size", flag, s);
  return n;
}

nlohmann::json options_record(const ConvertArgs& a) {
  nlohmann::json o = {
      {"bits", a.bits ? nlohmann::json(*a.bits) : nlohmann::json()},
      {"group_size", a.group_size ? nlohmann::json(*a.group_size) : nlohmann::json()},
      {"mode", a.mode},
      {"dtype", a.dtype},
      {"keep_float", a.keep_float},
      {"recipe", a.recipe},
      {"max_shard_size", a.max_shard},
      {"no_quantize", a.no_quantize}};
  if (!a.grid.empty()) o["grid"] = a.grid;
  if (!a.preset.empty()) o["preset"] = a.preset;
  if (a.gptq.enabled) o["gptq"] = gptq_options_record(a.gptq);
  if (a.rotate)
    o["rotate_weights"] = {{"r1", a.r1},
                           {"r2", a.r2.empty() ? "hadamard" : a.r2},
                           {"seed", a.seed},
                           {"fold_dtype", a.fold_dtype},
                           {"save_rotations", a.save_rotations}};
  if (a.target_bpw) o["target_bpw"] = *a.target_bpw;
  if (!a.target_size.empty()) o["target_size"] = a.target_size;
  if (!a.sensitivity.empty()) o["sensitivity"] = a.sensitivity;
  if (!a.channel_scale.empty()) o["channel_scale"] = a.channel_scale;
  if (a.allow_over) o["allow_over"] = true;
  if (!a.gptq.recovery.empty()) o["gptq_recovery"] = a.gptq.recovery;
  if (a.gptq.tied_head >= 0.0) o["gptq_tied_head"] = a.gptq.tied_head;
  if (a.distill) o["distill"] = *a.distill;
  if (a.distill.value_or(0) > 0) o["distill_seq_len"] = a.distill_seq_len;
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

Result<RotationOptions> rotation_options(const ConvertArgs& a) {
  TQ_TRY(RotationOptions ro, parse_rotation_options(a.r1, a.r2, a.seed));
  ro.fold_dtype = a.fold_dtype == "f64" ? FoldDType::kF64 : FoldDType::kF32;
  return ro;
}

// No --sensitivity: measure the table with `tq sensitivity`'s defaults, kept beside the results
// database under the model's fingerprint; a later run (or a killed one) reuses it.
Result<std::string> measured_sensitivity(const ConvertJob& job,
                                         const std::optional<RotationOptions>& rotation) {
  TQ_TRY(const std::string fp, eval::model_fingerprint(job.source));
  const std::string dir = fs::path(eval::default_results_db_path()).parent_path() / "sensitivity";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return err("{}: cannot create: {}", dir, ec.message());
  SensitivityRunOptions so;
  so.model = job.source.path;
  // The name carries what makes tables incompatible for --resume (dtype, scaling, rotation).
  so.out = fmt::format("{}/{:.16}-{}{}{}.json", dir, fp, dtype_name(job.plan.dtype),
                       so.scale_above_bits > 0 ? fmt::format("-s{}", so.scale_above_bits) : "",
                       rotation ? fmt::format("-rot-{}-{}-{}", rotation_kind_name(rotation->r1),
                                              rotation_kind_name(rotation->r2), rotation->seed)
                                : "");
  so.rotation = rotation;
  so.dtype = job.plan.dtype == DType::kF32 ? "f32" : job.plan.dtype == DType::kF16 ? "f16" : "bf16";
  so.resume = true;
  std::fprintf(stderr,
               "tq convert: no --sensitivity given: measuring it (tq sensitivity defaults) into "
               "%s\n",
               so.out.c_str());
  auto log = [](const std::string& line) {
    std::fprintf(stderr, "tq convert: sensitivity: %s\n", line.c_str());
  };
  TQ_TRY(SensitivityRunResult r,
         run_sensitivity(so, log, sensitivity_progress_printer("tq convert: sensitivity: ")));
  return so.out;
}

// The bytes of lm_head in the plan (the cost of the untie when a rotation made it).
uint64_t head_bytes(const QuantPlan& plan) {
  for (const PlanEntry& e : plan.entries)
    if (e.kind->role == TensorRole::kLmHead)
      return e.spec ? quantized_bytes(*e.spec, e.shape[0], e.shape[1], plan.dtype)
                    : static_cast<uint64_t>(shape_numel(e.shape)) * dtype_size(plan.dtype);
  return 0;
}

// --preset best: the composition that measured best on SmolLM2 (bench/README.md, "Quality
// frontier"); flags given explicitly keep their values. A source that ties its head keeps it
// tied: R1 would untie it, and at equal bytes the untied head cost more than R1 gained.
Result<ConvertArgs> apply_preset(ConvertArgs a) {
  if (a.preset != "best") {
    if (a.r1.empty()) a.r1 = "hadamard";
    return a;
  }
  a.rotate = true;
  a.gptq.enabled = true;
  if (a.grid.empty()) a.grid = "search";
  if (a.gptq.refit.empty()) a.gptq.refit = "on";
  if (a.gptq.tied_head < 0.0) a.gptq.tied_head = 0.1;  // ignored by an untied head
  // Distillation runs in one process; under mpirun the preset leaves it to `tq distill`.
  if (!a.distill && world().size() == 1) a.distill = kPresetDistillSteps;
  if (a.r1.empty()) {
    TQ_TRY(ModelSource src, open_model(a.src));
    a.r1 = src.config.tie_word_embeddings ? "none" : "hadamard";
    if (a.r1 == "none")
      std::fprintf(stderr,
                   "tq convert: --preset best: %s ties its head, so R1 (which unties it) is off "
                   "and R2 stays (--rotate-weights --r1 hadamard rotates anyway)\n",
                   a.src.c_str());
  }
  return a;
}

std::optional<DType> dtype_flag(const std::string& d) {
  if (d == "f32") return DType::kF32;
  if (d == "f16") return DType::kF16;
  if (d == "bf16") return DType::kBF16;
  return std::nullopt;
}

// Source, recipe, bits, group size and mode: what shapes the plan.
Status set_plan_flags(const ConvertArgs& a, ConvertOptions& o) {
  o.source = a.src;
  o.recipe = a.recipe;
  o.plan.bits = a.bits;
  o.plan.group_size = a.group_size;
  if (!a.mode.empty()) {
    auto m = quant_mode_from_name(a.mode);
    if (!m) return err("--mode {}: expected affine, mxfp4, nvfp4 or mxfp8", a.mode);
    o.plan.mode = *m;
  }
  return ok_status();
}

// The width the channel-scale search quantizes at: the conversion's spec, or for a target the
// affine g64 width whose bytes fit under it (3-bit for 3.5 bpw, 4-bit for 4.5).
Result<QuantSpec> scale_search_spec(const ConvertJob& job, const ConvertArgs& a) {
  if (!a.target_bpw && a.target_size.empty()) return job.plan.global;
  double bpw = a.target_bpw.value_or(0.0);
  if (!a.target_size.empty()) {
    TQ_TRY(const uint64_t bytes, positive_size(a.target_size, "--target-size"));
    bpw = 8.0 * static_cast<double>(bytes) / static_cast<double>(job.plan.size().params);
  }
  QuantSpec s;
  s.mode = QuantMode::kAffine;
  s.group_size = 64;
  s.bits = std::clamp(static_cast<int>(std::floor(bpw - 0.5)), 2, 8);
  if (s.bits == 7) s.bits = 6;
  return s;
}

// --distill: trains the just-written `undistilled` artifact's scales and biases against `source`
// and publishes the result at a.out; returns the conversion's seconds plus distillation's.
Result<double> distill_converted(const std::string& source, const std::string& undistilled,
                                 const ConvertArgs& a, double convert_seconds) {
  TQ_TRY(ModelSource teacher, open_model(source));
  TQ_TRY(ModelSource student, open_model(undistilled));
  TQ_TRY(Tokenizer tok, load_model_tokenizer(student));
  DistillOptions d;
  d.steps = *a.distill;
  d.cancel = &g_interrupted;
  // GPTQ's corpus and seed, cut into distillation rows: a new row for every step.
  CalibOptions co = calib_options(a.gptq);
  co.seq_len = a.distill_seq_len;
  co.tokens = distill_calib_tokens(d, co.seq_len);
  TQ_TRY(CalibSet calib, build_calib_set(tok, co));
  std::fprintf(stderr, "tq convert: distill %lld steps of %lld rows on %lld calibration rows\n",
               static_cast<long long>(d.steps), static_cast<long long>(d.seqs_per_step),
               static_cast<long long>(calib.rows()));
  auto progress = distill_progress_printer("tq convert: distill ");
  TQ_TRY(DistillResult r, distill_scales(teacher, student, calib, d, progress));
  const auto* dir = dynamic_cast<const DirTensorSource*>(student.tensors.get());
  // The student is the temporary conversion: record what the user gave instead.
  nlohmann::json rec = distill_record(source, a.out, d, calib, r);
  if (a.no_timings) rec.erase("seconds");
  TQ_CHECK_OK(write_patched_checkpoint(*dir, r.stored, {{"distill", rec}}, a.out, a.force));
  std::fprintf(stderr, "tq convert: distill: held-out KL %.5f -> %.5f on %lld rows, %.1f s\n",
               r.holdout_before, r.holdout_after, static_cast<long long>(d.holdout_rows),
               r.seconds);
  return convert_seconds + r.seconds;
}

Status run_convert_verb(const ConvertArgs& args) {
  TQ_TRY(ConvertArgs a, apply_preset(args));
  const ConvertArgs recorded = a;
  // --channel-scale on: the conversion quantizes the scaled (and rotated) float model instead.
  nlohmann::json scaled_record;
  std::string origin;
  if (a.channel_scale == "on") {
    if (a.no_quantize)
      return err("--channel-scale prepares a model for quantization; drop --no-quantize");
    if (a.save_rotations)
      return err("--save-rotations is not kept through --channel-scale; drop one of them");
    if (!a.dry_run && a.out.empty()) return err("-o/--output DST is required (or --dry-run)");
    if (!a.dry_run) TQ_CHECK_OK(StagingDir::check_dest(a.out, a.force));  // before the long pass
    ConvertOptions probe;
    TQ_CHECK_OK(set_plan_flags(a, probe));
    TQ_TRY(ConvertJob pj, prepare_convert(probe));
    TQ_TRY(const QuantSpec spec, scale_search_spec(pj, a));
    std::optional<RotationOptions> ro;
    if (a.rotate) {
      TQ_TRY(ro, rotation_options(a));
    }
    if (!a.dry_run) {
      const DType dtype = dtype_flag(a.dtype).value_or(default_quantized_dtype(pj.source));
      TQ_TRY(ScaledSource ss, scaled_source(a.src, ro, spec, dtype, a.gptq));
      scaled_record = ss.record;
      origin = a.src;
      a.src = ss.dir;
      a.rotate = false;  // folded into the scaled model
    }
  }
  ConvertOptions o;
  TQ_CHECK_OK(set_plan_flags(a, o));
  o.dest = a.out;
  o.force = a.force;
  o.record_timings = !a.no_timings;
  o.plan.keep_float = a.keep_float;
  o.dtype = dtype_flag(a.dtype);
  TQ_TRY(o.max_shard_bytes, positive_size(a.max_shard, "--max-shard-size"));
  o.options_record = options_record(recorded);
  o.origin = origin;
  if (!scaled_record.is_null()) o.extra_metadata["transforms"] = scaled_record["transforms"];
  if (!scaled_record.is_null()) o.extra_metadata["scaled_source"] = scaled_record["path"];
  GridChoice grid = GridChoice::kMinMax;
  if (!a.grid.empty() && !parse_grid_choice(a.grid, &grid))
    return err("--grid {}: expected minmax or search", a.grid);
  if (!a.gptq.refit.empty() && !a.gptq.enabled)
    return err("--grid-refit refits grids after GPTQ; add --gptq");
  if (!a.gptq.asym.empty() && !a.gptq.enabled)
    return err("--gptq-asym is a GPTQ option; add --gptq");
  if (!a.gptq.recovery.empty() && !(a.gptq.enabled && (a.target_bpw || !a.target_size.empty())))
    return err("--gptq-recovery corrects an allocation for GPTQ; add --gptq and a target");
  if (a.gptq.tied_head >= 0.0 && !a.gptq.enabled)
    return err("--gptq-tied-head quantizes a tied embedding by GPTQ; add --gptq");
  if (!a.dry_run && a.out.empty()) return err("-o/--output DST is required (or --dry-run)");
  const int64_t distill_steps = a.distill.value_or(0);
  if (distill_steps < 0)
    return err("--distill {}: expected a number of steps, 0 or more", distill_steps);
  if (distill_steps > 0 && a.distill_seq_len < 2)
    return err("--distill-seq-len {}: expected 2 tokens or more", a.distill_seq_len);
  if (distill_steps > 0 && a.no_quantize)
    return err("--distill trains quantized scales and biases; drop --no-quantize");
  if (distill_steps > 0 && world().size() > 1)
    return err("--distill runs in one process; convert under mpirun, then run tq distill");
  // --no-quantize: every module float (the folded float model: the rotation parity instrument).
  if (a.no_quantize) o.plan.keep_float = {"*"};

  const bool allocating = a.target_bpw || !a.target_size.empty();
  if (!allocating && (!a.sensitivity.empty() || a.allow_over))
    return err("--sensitivity/--allow-over only apply with --target-bpw or --target-size");
  if (allocating && (a.bits || !a.mode.empty() || a.group_size))
    return err(
        "--target-bpw/--target-size choose each module's spec from the sensitivity "
        "table; drop --bits/--mode/--group-size (pin modules with a recipe instead)");
  if (allocating && a.no_quantize)
    return err("--target-bpw/--target-size choose quantized specs; drop --no-quantize");
  std::unique_ptr<RotationTransform> rotation;
  std::vector<WeightTransform*> transforms;
  if (a.rotate) {
    TQ_TRY(RotationOptions ro, rotation_options(a));
    TQ_TRY(ModelSource src, open_model(a.src));  // the fold is planned on the source geometry
    TQ_TRY(rotation, RotationTransform::create(src.config, ro, a.save_rotations));
    transforms.push_back(rotation.get());
  }
  TQ_TRY(ConvertJob job, prepare_convert(o, transforms));
  nlohmann::json allocation;  // null unless allocating
  std::optional<AllocateOutcome> alloc;
  std::optional<GptqRecovery> recovery;
  if (allocating) {
    AllocateRequest req;
    req.target_bpw = a.target_bpw.value_or(0);
    if (!a.target_size.empty()) {
      TQ_TRY(req.target_bytes, positive_size(a.target_size, "--target-size"));
    }
    req.allow_over = a.allow_over;
    req.sensitivity = a.sensitivity;
    std::optional<RotationOptions> ro;
    if (a.rotate) {
      TQ_TRY(ro, rotation_options(a));
      req.rotation = rotation_identity(*ro);
    }
    if (req.sensitivity.empty()) {
      TQ_TRY(req.sensitivity, measured_sensitivity(job, ro));
    }
    if (a.gptq.enabled && a.gptq.recovery != "off") {
      TQ_TRY(recovery, measure_recovery(a.gptq, job, req.sensitivity));
      req.recovery = &*recovery;
    }
    TQ_TRY(alloc, allocate_convert_plan(job, req));
    if (recovery && a.no_timings) alloc->record["gptq_recovery"].erase("seconds");
    allocation = alloc->record;
    if (alloc->uniform.uniform_better)
      std::fprintf(stderr,
                   "tq convert: warning: uniform %s (%llu bytes) is predicted better than this "
                   "allocation: summed KL %.6g vs %.6g nats from the same table\n",
                   quant_spec_str(*alloc->uniform.spec).c_str(),
                   static_cast<unsigned long long>(alloc->uniform.bytes),
                   alloc->uniform.predicted_kl, alloc->plan.predicted_kl);
    o.extra_metadata["allocation"] = allocation;
  }
  SizeStats plan_size = job.plan.size();
  std::string untie_line;  // bytes are what a user compares; mlx-lm's bpw counts the new head too
  const uint64_t hb = rotation && rotation->unties_head() ? head_bytes(job.plan) : 0;
  if (hb) {
    untie_line = fmt::format(
        "the rotation unties the tied head: lm_head adds {} bytes ({:.1f}% of {}){}", hb,
        100.0 * static_cast<double>(hb) / static_cast<double>(plan_size.bytes), plan_size.bytes,
        a.target_bpw ? "; --target-size SIZE holds the artifact to the bytes of a tied one" : "");
  }
  if (a.dry_run) {
    if (a.json) {
      nlohmann::json j = {{"dry_run", true},
                          {"source", job.source.path},
                          {"params", plan_size.params},
                          {"bytes", plan_size.bytes},
                          {"bpw", plan_size.bpw},
                          {"dtype", dtype_name(job.plan.dtype)},
                          {"dtype_reason", job.dtype_reason},
                          {"quantization", job.plan.quantization_json()},
                          {"modules", job.plan.modules_json()}};
      if (alloc) j["allocation"] = allocation;
      if (hb) j["untied_head_bytes"] = hb;
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      for (const auto& line : describe_plan(job)) std::printf("%s\n", line.c_str());
      if (!untie_line.empty()) std::printf("%s\n", untie_line.c_str());
      if (alloc)
        std::printf(
            "allocation: target %s, achieved %.4f bpw, predicted summed KL %.6g nats "
            "(%d modules allocated, %d pinned)\n",
            a.target_bpw ? fmt::format("{} bpw", *a.target_bpw).c_str()
                         : (a.target_size + " bytes").c_str(),
            plan_size.bpw, alloc->plan.predicted_kl, alloc->free_modules, alloc->pinned_modules);
      if (alloc && alloc->uniform.spec)
        std::printf("uniform:    %s at %llu bytes, predicted summed KL %.6g nats\n",
                    quant_spec_str(*alloc->uniform.spec).c_str(),
                    static_cast<unsigned long long>(alloc->uniform.bytes),
                    alloc->uniform.predicted_kl);
    }
    return ok_status();
  }

  // Under mpirun only GPTQ spreads (over calibration rows); rank 0 does everything else and is
  // the only one that writes.
  const bool root = world().rank() == 0;
  if (!root && !a.gptq.enabled) return ok_status();
  o.write_output = root;
  if (root) TQ_CHECK_OK(StagingDir::check_dest(o.dest, o.force));  // before any output
  if (world().size() == 1) {  // under mpirun, a signal ends the job (main.cc says so once)
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGHUP, &sa, nullptr);
    ::sigaction(SIGQUIT, &sa, nullptr);
  }
  o.cancel = &g_interrupted;
  ProgressPrinter printer(true);
  if (root) o.progress = [&printer](const ConvertProgress& p) { printer(p); };
  if (root)
    std::fprintf(stderr, "tq convert: %s -> %s (%s, %.4f bpw, %llu bytes)\n", a.src.c_str(),
                 a.out.c_str(), quant_spec_str(job.plan.global).c_str(), plan_size.bpw,
                 static_cast<unsigned long long>(plan_size.bytes));
  if (root && !untie_line.empty()) std::fprintf(stderr, "tq convert: %s\n", untie_line.c_str());
  RtnQuantizer rtn(grid);
  LayerQuantizer* quantizer = &rtn;
  GptqSetup gptq;
  if (a.gptq.enabled) {
    GptqArgs ga = a.gptq;
    ga.grid = grid;
    TQ_TRY(gptq, make_gptq(ga, job, o));
    quantizer = gptq.quantizer.get();
  }
  // --distill: the conversion goes to a sibling directory that distillation reads and removes.
  std::string undistilled;
  if (distill_steps > 0) {
    undistilled = fmt::format("{}.tq-undistilled-{}", a.out, static_cast<long long>(::getpid()));
    o.dest = undistilled;
    o.force = true;
  }
  struct RemoveDir {
    std::string path;
    ~RemoveDir() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  } remove_undistilled{undistilled};
  TQ_TRY(ConvertSummary s, run_convert(job, *quantizer, o));
  if (!root) return ok_status();
  if (distill_steps > 0) {
    TQ_TRY(s.seconds, distill_converted(recorded.src, undistilled, a, s.seconds));
    s.dest = a.out;
  }
  if (a.gptq.enabled) {
    const nlohmann::json g = gptq.quantizer->metadata()["guards"];
    std::fprintf(stderr,
                 "tq convert: gptq guards: %d modules, %d escalated damping, %d fell back to RTN "
                 "(%d Cholesky failures, %d scale and %d loss divergences)\n",
                 g.value("modules", 0), g.value("escalated", 0), g.value("fallbacks", 0),
                 g.value("cholesky_failures", 0), g.value("scale_divergences", 0),
                 g.value("loss_divergences", 0));
    std::error_code ec;
    std::filesystem::remove_all(gptq.checkpoint_dir, ec);  // the output is complete
  }
  if (a.json) {
    nlohmann::json j = {{"dest", s.dest},
                        {"params", s.size.params},
                        {"bytes", s.size.bytes},
                        {"bpw", s.size.bpw},
                        {"seconds", s.seconds},
                        {"files", s.files},
                        {"bytes_in_f32", s.bytes_in}};
    if (alloc) j["allocation"] = allocation;
    std::printf("%s\n", j.dump(2).c_str());
  }
  std::fprintf(stderr, "tq convert: wrote %s in %.1f s\n", a.out.c_str(), s.seconds);
  if (!a.db.off) {
    // The artifact is published: a database problem is a warning, not a failed conversion.
    Result<eval::RunRecord> rec = convert_run_record(job, s, allocation);
    Status st = rec.ok() ? record_run(a.db, *rec) : Status(rec.error());
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
                     "float tensors and affine scales: f32, f16 or bf16 (default: bf16 when "
                     "anything is quantized, f16 for an f16 source; else the source's float "
                     "dtype, bf16 for GGUF)")
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
      app.add_option(
          "--sensitivity", a->sensitivity,
          "sensitivity.json from `tq sensitivity` (default with a target: measured now with tq "
          "sensitivity's defaults and kept under $XDG_DATA_HOME/turboquant/sensitivity)");
      app.add_flag("--allow-over", a->allow_over,
                   "the allocation may exceed the target by up to 0.02 bpw");
      add_db_flags(app, &a->db, "artifact");
      app.add_flag("--no-timings", a->no_timings,
                   "leave timings out of tq_metadata.json (byte-identical reruns)");
      app.add_option("--grid", a->grid,
                     "affine scale/bias per group: minmax (mx.quantize's) or search (lowest "
                     "squared error; with --gptq weighted by the Hessian) (default minmax)")
          ->check(CLI::IsMember({"minmax", "search"}));
      app.add_option("--preset", a->preset,
                     "best: --rotate-weights --gptq --grid search --grid-refit on --distill 160 "
                     "(with --target-bpw/--target-size or --bits; docs/GPTQ.md)")
          ->check(CLI::IsMember({"best"}));
      add_gptq_flags(app, &a->gptq);
      app.add_option("--distill", a->distill,
                     "after quantizing, train the affine scales and biases N steps against the "
                     "source on the --calib text (tq distill; docs/DISTILL.md); 0 = off (default)");
      app.add_option("--distill-seq-len", a->distill_seq_len,
                     "tokens per distillation row, each step a new row (default 256)");
      app.add_option("--channel-scale", a->channel_scale,
                     "on: scale input channels by activation size (folded exactly into the norms "
                     "and up_proj) before quantizing, measured on the --calib text; off (default; "
                     "docs/CHANNEL_SCALE.md)")
          ->check(CLI::IsMember({"on", "off"}));
      app.add_flag("--no-quantize", a->no_quantize,
                   "write every tensor float (with --rotate-weights: the folded float model)");
      auto* rot = app.add_flag("--rotate-weights", a->rotate,
                               "fold rotations into the weights before quantizing: untie, "
                               "gamma-fold, R1 (hidden), R2 (per-head v/o)");
      const std::vector<std::string> kinds = {"hadamard", "random", "none"};
      app.add_option("--r1", a->r1, "R1 on the residual stream: hadamard (default), random, none")
          ->check(CLI::IsMember(kinds))
          ->needs(rot);
      app.add_option("--r2", a->r2, "R2 per head between v and o: hadamard (default), random, none")
          ->check(CLI::IsMember(kinds))
          ->needs(rot);
      app.add_option("--seed", a->seed, "seed of the rotations' signs / Gaussians (default 0)")
          ->needs(rot);
      app.add_option("--fold-dtype", a->fold_dtype, "precision of the folds: f32 (default), f64")
          ->check(CLI::IsMember({"f32", "f64"}))
          ->needs(rot);
      app.add_flag("--save-rotations", a->save_rotations,
                   "also write rotations.safetensors (R1 and every layer's R2, F64)")
          ->needs(rot);
      return [a]() { return run_convert_verb(*a); };
    },
});

}  // namespace
}  // namespace tq::cli
