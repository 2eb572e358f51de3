// tq sensitivity MODEL: per-module KL at each candidate spec -> sensitivity.json (schema in
// recipe/sensitivity.h). Rewritten atomically after every module, so --resume after a kill
// repeats no finished module.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <memory>

#include "base/comm.h"
#include "cli/sensitivity_progress.h"
#include "cli/verb.h"
#include "cli/window_flags.h"

namespace tq::cli {
namespace {

struct SensOptions : SensitivityRunOptions {
  bool rotate_weights = false, json = false;
  std::string r1 = "hadamard", r2;
  uint64_t seed = 0;
};

std::string mmss(double s) {
  int64_t t = static_cast<int64_t>(s + 0.5);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

}  // namespace

// Progress on stderr: one rewritten line on a terminal, else a line every 10 s.
std::function<void(const SensitivityProgress&)> sensitivity_progress_printer(const char* prefix) {
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  auto last = std::make_shared<std::chrono::steady_clock::time_point>(
      std::chrono::steady_clock::now() - std::chrono::seconds(60));
  std::string pre = prefix;
  return [tty, last, pre](const SensitivityProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (!tty && p.done != p.total && now - *last < std::chrono::seconds(10)) return;
    *last = now;
    std::string line =
        fmt::format("{}{}/{} measurements ({}), {:.2f} s each, {} elapsed, ETA {}", pre, p.done,
                    p.total, p.module, p.elapsed_s / p.done, mmss(p.elapsed_s), mmss(p.eta_s));
    if (tty)
      fmt::print(stderr, "\r{}\x1b[K{}", line, p.done == p.total ? "\n" : "");
    else
      fmt::print(stderr, "{}\n", line);
  };
}

namespace {

Status run_sensitivity_verb(SensOptions o) {
  if (o.rotate_weights) {
    TQ_TRY(o.rotation, parse_rotation_options(o.r1, o.r2, o.seed));
  } else if (o.r1 != "hadamard" || !o.r2.empty() || o.seed != 0) {
    return err("--r1/--r2/--seed only apply with --rotate-weights");
  }
  auto log = [](const std::string& line) { fmt::print(stderr, "sensitivity: {}\n", line); };
  TQ_TRY(SensitivityRunResult r,
         run_sensitivity(o, log, sensitivity_progress_printer("sensitivity: ")));
  if (world().rank() != 0) return ok_status();  // rank 0 wrote the file and reports it
  const SensitivityTable& t = r.table;
  nlohmann::json j = {{"output", o.out},         {"modules", t.modules.size()},
                      {"specs", t.specs.size()}, {"measured", r.measured_modules},
                      {"seconds", r.seconds},    {"tokens_scored", t.calibration.tokens_scored}};
  if (o.json)
    fmt::print("{}\n", j.dump());
  else if (r.measured_modules == 0)
    fmt::print("{}: all {} modules already measured\n", o.out, t.modules.size());
  else
    fmt::print("wrote {}: {} modules x {} specs ({} measured now) in {:.1f} s\n", o.out,
               t.modules.size(), t.specs.size(), r.measured_modules, r.seconds);
  return ok_status();
}

const bool kRegistered = register_verb(
    {"sensitivity", "Per-module KL of the output at each candidate quantization spec", 50,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<SensOptions>();
       app.add_option("model", o->model, "HF or MLX safetensors directory, or a GGUF file")
           ->required();
       app.add_option("--calib", o->calib,
                      "Calibration text file, or a directory of .txt files (default: the State "
                      "of the Union texts in $TQ_CACHE)");
       add_window_size_flags(app, &o->seq_len, &o->windows, "Calibration windows");
       app.add_option("--bits", o->bits, "Affine bit widths, comma-separated")
           ->capture_default_str();
       app.add_option("--modes", o->modes, "Modes: affine, mxfp4, nvfp4, mxfp8 (comma-separated)")
           ->capture_default_str();
       app.add_option("--group-size", o->group_sizes,
                      "Affine group sizes, comma-separated (32, 64, 128): each width is measured "
                      "at each")
           ->capture_default_str();
       app.add_option("--scale-above", o->scale_above_bits,
                      "Affine widths above this many bits are not run through the network: "
                      "their KL is the widest measured width's times the ratio of squared "
                      "weight errors (0: measure every spec)")
           ->capture_default_str();
       app.add_option("--threads", o->threads,
                      "Modules measured at once, each on one thread (0: one per hardware "
                      "thread, shared among the mpirun ranks on the host)")
           ->capture_default_str();
       app.add_option("--dtype", o->dtype,
                      "Float dtype of the artifact (weights rounded to it; scales, biases and "
                      "float tensors stored in it): bf16, f16, f32")
           ->capture_default_str();
       app.add_option("-o,--output", o->out, "Output file")->capture_default_str();
       app.add_option("--only", o->only,
                      "Measure only modules whose name contains this text (repeatable), e.g. "
                      "'layers.3.' or 'embed_tokens'; later runs with --resume add the rest");
       app.add_flag("--resume", o->resume, "Continue an interrupted run of the same options");
       app.add_flag(
           "--no-timings", [o](int64_t) { o->record_timings = false; },
           "Write every module's seconds as 0, so that reruns and mpirun jobs give identical "
           "bytes");
       app.add_flag("--rotate-weights", o->rotate_weights,
                    "Measure on the rotation-folded model (as tq convert --rotate-weights; the "
                    "table then only serves conversions with the same rotation)");
       app.add_option("--r1", o->r1, "With --rotate-weights: hadamard, random or none")
           ->capture_default_str();
       app.add_option("--r2", o->r2, "With --rotate-weights: hadamard, random or none")
           ->capture_default_str();
       app.add_option("--seed", o->seed, "With --rotate-weights: rotation seed")
           ->capture_default_str();
       app.add_flag("--json", o->json, "Print one JSON object");
       return [o] { return run_sensitivity_verb(*o); };
     }});

}  // namespace
}  // namespace tq::cli
