// Distillation of an MLX affine-quantized model's scales and biases against its float source
// (docs/DISTILL.md): the codes stay fixed; every group's scale and bias is trained end to end by
// Adam on KL(teacher || student) of the next-token distributions over calibration rows.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "model/model_source.h"
#include "quant/calib.h"

namespace tq {

struct DistillOptions {
  int64_t steps = 128;
  int64_t seqs_per_step = 1;  // calibration rows per step
  int64_t holdout_rows = 4;   // the last rows, kept out of training for the before/after KL
  double lr = 1e-3;           // Adam's peak step in units of each group's initial |scale|
  double temperature = 1.0;   // of both distributions in the loss
  bool schedule = true;       // warm-up then cosine decay of lr (else warm-up, then constant)
  // Each step's forward sees the scales and biases rounded to their stored dtype (straight
  // through); else they are trained in f32 and rounded once, when written.
  bool round_each_step = false;
  // Also train every RMSNorm's weight (stored float): per-channel input scales that the group
  // scales cannot express, at no cost in bytes.
  bool train_norms = false;
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. by SIGINT) to stop between steps
};

struct DistillProgress {
  int64_t step = 0, steps = 0;
  double loss = 0.0;  // mean KL per token of this step's rows, at the temperature
  double seconds = 0.0;
};

struct DistillResult {
  int64_t tensors = 0, groups = 0, norms = 0, train_tokens = 0;
  double holdout_before = 0.0, holdout_after = 0.0;  // mean KL per token at T = 1
  std::vector<double> losses;                        // per step
  // New bytes of every trained "P.scales" / "P.biases" (and norm weight), in its stored dtype.
  std::map<std::string, std::vector<uint8_t>> stored;
  double seconds = 0.0;
};

// `student` must be an MLX directory of `teacher`'s geometry; its affine-quantized matrices are
// trained, every other tensor is used as stored. Rows of `calib` are used in order, cyclically.
Result<DistillResult> distill_scales(const ModelSource& teacher, const ModelSource& student,
                                     const CalibSet& calib, const DistillOptions& o,
                                     const std::function<void(const DistillProgress&)>& progress);

// Tokens per distillation row: at equal tokens, 256-token rows (twice the steps of 512) measured
// lower KL on every text and took less time (bench/README.md, "Distilled scales and biases").
constexpr int64_t kDistillSeqLen = 256;

// The calibration tokens that give every step rows of its own, and the held-out rows: the
// default budget (repeated rows measured worse on text unlike the calibration's).
inline int64_t distill_calib_tokens(const DistillOptions& o, int64_t seq_len) {
  return (o.steps * o.seqs_per_step + o.holdout_rows) * seq_len;
}

// The `distill` record of tq_metadata.json: models, options, calibration set, held-out KL.
nlohmann::json distill_record(const std::string& teacher, const std::string& student,
                              const DistillOptions& o, const CalibSet& calib,
                              const DistillResult& r);

}  // namespace tq
