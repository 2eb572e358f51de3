// The `tq sensitivity` job as a library call, so `tq convert --target-bpw` can measure the table
// itself when no --sensitivity file is given. Writes the table atomically after every module:
// a killed run resumed with the same options repeats no finished module.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "model/model_config.h"
#include "recipe/sensitivity.h"
#include "rotate/fold_plan.h"

namespace tq {

struct SensitivityRunOptions {
  std::string model;
  std::string calib;  // a text file or a directory of .txt; empty: the SOTU corpus in the cache
  std::string out = "sensitivity.json";
  std::string bits = "2,3,4,5,6,8";  // affine widths, comma-separated
  std::string modes = "affine";      // comma-separated
  std::string dtype = "bf16";
  int64_t seq_len = 128, windows = 2;
  std::string group_sizes = "64";  // affine group sizes, comma-separated
  int64_t threads = 0;             // modules measured at once; 0: one per hardware thread
  // Affine widths above this are scaled from the widest measured one (SensitivityMeter::measure);
  // 0 runs every spec through the network.
  int scale_above_bits = 4;
  std::vector<std::string> only;  // module-name substrings
  bool resume = false;
  bool record_timings = true;  // false: every "seconds" is 0, so reruns give identical bytes
  // Measure on the rotation-folded model (folded to "<out>.folded/" first, removed after).
  std::optional<RotationOptions> rotation;
};

struct SensitivityProgress {
  int64_t done = 0, total = 0;
  std::string module;
  double elapsed_s = 0, eta_s = 0;
};

struct SensitivityRunResult {
  SensitivityTable table;
  int64_t measured_modules = 0;  // measured by this run (not resumed)
  double seconds = 0;
};

// The SOTU corpus directory the setup script installs.
std::string default_sensitivity_calib();

// Seconds the measurements of `todo` should take, from the reference pass (one full forward
// over the windows): each measurement re-runs only the layers from its module's on, plus the
// head. `all` is every quantizable module (their weights give each layer's share).
double estimate_measure_seconds(const ModelConfig& cfg, std::span<const ModuleSensitivity> all,
                                std::span<const ModuleSensitivity> todo,
                                std::span<const QuantSpec> specs, double reference_s);

// The specs run through the network when wider affine ones are scaled (scale_above_bits).
std::vector<QuantSpec> network_specs(std::span<const QuantSpec> specs, int scale_above_bits);

// Under mpirun (base/comm.h) every rank calls this: rank 0 reads and writes the file and hands
// modules to the workers of every rank; the file is the one a single process writes.
// `log` gets one-off lines (plan, reference pass, the estimate); `progress` gets a call after
// every spec.
Result<SensitivityRunResult> run_sensitivity(
    const SensitivityRunOptions& o, const std::function<void(const std::string&)>& log,
    const std::function<void(const SensitivityProgress&)>& progress);

}  // namespace tq
