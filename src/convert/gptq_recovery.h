// What GPTQ recovers of RTN's loss, by role and spec, measured before the allocation so that
// the sensitivity table's RTN KLs become estimates of what the GPTQ conversion loses (issue 28).
// The float model (the conversion's transforms applied) runs over a few calibration rows; in
// evenly spaced layers each linear module is quantized at every measured spec by GPTQ (the
// conversion's options) and by the table's RTN (min/max grid), both against the Hessian of its
// float input. A role's factor at a spec is the geometric mean of proxy_loss(GPTQ) /
// proxy_loss(RTN) over its sampled modules; KL is second order in the output error, so the
// allocation takes KL_gptq ≈ factor · KL_rtn (docs/ALLOCATION.md, "GPTQ recovery").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "convert/convert.h"
#include "formats/quant_spec.h"
#include "model/tensor_table.h"
#include "quant/calib.h"
#include "quant/gptq.h"

namespace tq {

struct GptqRecovery {
  std::vector<QuantSpec> specs;                      // measured, in the table's order
  std::map<TensorRole, std::vector<double>> factor;  // per role, one per specs[i]
  std::vector<int64_t> layers;                       // the sampled layers
  int64_t rows = 0, seq_len = 0;
  int64_t modules = 0;  // modules sampled (each at every spec)
  double seconds = 0;

  // The factor for a module of `role` stored at `spec`: the measured one; an affine width
  // outside the measured ones takes the nearest measured width of its group size; 1 for a
  // role or mode nothing measured (e.g. the RTN-quantized embedding and head).
  double factor_for(TensorRole role, const QuantSpec& spec) const;
  nlohmann::json to_json() const;
};

struct GptqRecoveryOptions {
  GptqOptions gptq;              // the conversion's
  std::vector<QuantSpec> specs;  // usually the table's network specs
  int64_t rows = 32;             // the calibration set's first rows
  int sample_layers = 6;
  int64_t head_rows = 4096;  // an untied head's rows sampled (evenly spaced)
  // > 0: a tied, quantized embedding goes through GPTQ as the head (GptqQuantizer's
  // tied_head_ridge), so its rows are sampled as the head's, role kEmbed, H's diagonal raised.
  double tied_head_ridge = 0.0;
  std::function<void(const std::string&)> log;  // one line per sampled layer
};

// Runs the job's source through its transforms (nothing is written). The modules the plan
// leaves float are sampled too: the factor is a property of the role.
Result<GptqRecovery> measure_gptq_recovery(ConvertJob& job, const CalibSet& calib,
                                           const GptqRecoveryOptions& o);

// The layers sampled out of n: k evenly spaced, each at the middle of its stretch.
std::vector<int64_t> recovery_layers(int64_t n, int k);

}  // namespace tq
