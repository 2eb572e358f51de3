// `tq convert --gptq`: the GPTQ flags, the calibration set and the GPTQ quantizer for a
// prepared conversion (kept apart from verb_convert.cc so the two merge easily).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "convert/convert.h"
#include "convert/gptq_recovery.h"
#include "quant/calib.h"
#include "quant/gptq_quantizer.h"

namespace tq::cli {

struct GptqArgs {
  bool enabled = false;
  std::vector<std::string> calib;
  int64_t calib_tokens = 128 * 512, calib_seq_len = 512;
  uint64_t calib_seed = 123;
  std::string eval_text, max_calib_memory = "2GiB", checkpoint, calib_save;
  int block = 128;
  double damp = 0.01;
  bool act_order = false, resume = false;
  GridChoice grid = GridChoice::kMinMax;  // resolved from tq convert's --grid
  std::string refit;                      // --grid-refit on|off ("": the default)
  std::string recovery;                   // --gptq-recovery on|off ("": on with a target)
  std::string asym;                       // --gptq-asym on|off ("": off)
  double tied_head = -1.0;  // --gptq-tied-head ridge (0: RTN embedding; < 0: not given)
  double tied_head_ridge() const { return tied_head > 0.0 ? tied_head : 0.0; }
  bool refit_on() const { return refit == "on"; }
};

void add_gptq_flags(CLI::App& app, GptqArgs* a);
// The calibration set the --calib* flags describe.
CalibOptions calib_options(const GptqArgs& a);
// The GPTQ options the flags describe (grid as resolved into a.grid).
GptqOptions gptq_options(const GptqArgs& a);
nlohmann::json gptq_options_record(const GptqArgs& a);

// Everything a GPTQ conversion needs besides the job: the quantizer (owning the driver) and
// the checkpoint directory to remove after a successful run.
struct GptqSetup {
  std::unique_ptr<GptqQuantizer> quantizer;
  std::string checkpoint_dir;
};
// With a target: what GPTQ recovers per role and spec of the table at `table_path`
// (convert/gptq_recovery.h), measured on rank 0 and sent to the others.
Result<GptqRecovery> measure_recovery(const GptqArgs& a, ConvertJob& job,
                                      const std::string& table_path);

Result<GptqSetup> make_gptq(const GptqArgs& a, const ConvertJob& job, const ConvertOptions& o);

}  // namespace tq::cli
