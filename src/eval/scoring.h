// The two measurements, window by window: NLL of every scored target (`tq ppl`) and the
// base-vs-candidate comparison (`tq kl`). Only one window's logits are held at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/comm.h"
#include "base/result.h"
#include "eval/token_metrics.h"
#include "eval/windows.h"

namespace tq::eval {

class BaseLogitsReader;
class BaseLogitsWriter;

// A model as the drivers see it: logits [tokens.size(), vocab] for one independent window fed
// from position 0 (no context carried over from the previous window).
struct LogitsModel {
  int64_t vocab = 0;
  std::function<Status(std::span<const int32_t> tokens, std::span<float> logits)> window_logits;
};

// Called after each window with (windows done, windows total).
using WindowProgress = std::function<void(int64_t, int64_t)>;

// Per-token NLL of every scored target, in window order ([windows * scored_per_window]).
// With a communicator of several ranks, each scores a contiguous range of windows and rank 0
// returns them all in window order (the other ranks return only their own): what is computed
// from the vector then does not depend on the rank count.
Result<std::vector<double>> score_nll(const LogitsModel& model, const Windows& w,
                                      const WindowProgress& progress = nullptr,
                                      Comm* comm = nullptr);

// Argmax flips where the base's top-2 logits are this close count as ties.
inline constexpr float kTieEps = 1e-6f;

struct KlTokens {
  std::vector<double> kl, nll_base, nll_cand;  // per scored token
  int64_t agree = 0;                           // argmax equal
  int64_t flips = 0;                           // argmax differs
  int64_t flip_ties = 0;                       // flips where the base's top-2 gap <= kTieEps
  void add(const TokenCompare& c);
};

struct KlReport {
  Summary kl;
  int64_t tokens = 0;
  double top1_agreement = 0;
  int64_t flips = 0;
  int64_t flip_ties = 0;
  Perplexity base, cand;
  double ppl_ratio = 0;  // candidate / base
};
KlReport kl_report(const KlTokens& t);

// Base rows come from `base_model`, or (when it is null) from `base_file`. When `save` is set,
// the base model's rows of every window are also written to it (one rank only). Split over
// the ranks of `comm` as score_nll is.
Result<KlTokens> score_kl(const Windows& w, const LogitsModel* base_model,
                          const BaseLogitsReader* base_file, const LogitsModel& cand,
                          BaseLogitsWriter* save, const WindowProgress& progress = nullptr,
                          Comm* comm = nullptr);

}  // namespace tq::eval
