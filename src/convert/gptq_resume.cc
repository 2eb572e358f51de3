#include "convert/gptq_resume.h"

#include "base/sha256.h"

namespace tq {

nlohmann::json gptq_options_record(const CalibOptions& calib, const GptqOptions& gptq) {
  nlohmann::json j = {{"calib", calib.files},           {"calib_tokens", calib.tokens},
                      {"calib_seq_len", calib.seq_len}, {"calib_seed", calib.seed},
                      {"gptq_block", gptq.block},       {"damp", gptq.damp},
                      {"act_order", gptq.act_order}};
  // Only when not the old default, so that earlier checkpoints keep their fingerprint.
  if (gptq.grid != GridChoice::kMinMax) j["grid"] = grid_choice_name(gptq.grid);
  if (gptq.refit) j["refit"] = true;
  if (gptq.asym) j["asym"] = true;
  return j;
}

std::string gptq_resume_fingerprint(const ConvertJob& job, const CalibOptions& calib,
                                    const GptqOptions& gptq, const std::string& calib_sha256) {
  Sha256 fp;
  fp.update(job.source.path);
  fp.update(job.config.dump());
  fp.update(job.plan.modules_json().dump());
  fp.update(dtype_name(job.plan.dtype));
  fp.update(gptq_options_record(calib, gptq).dump());
  fp.update(calib_sha256);
  return fp.hex_digest();
}

}  // namespace tq
