// What a GPTQ conversion records of its options (tq_metadata.json), and the fingerprint its
// per-layer checkpoint carries: --resume continues only a run of the same source config, plan,
// dtype, GPTQ options and calibration rows.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "convert/convert.h"
#include "quant/calib.h"
#include "quant/gptq.h"

namespace tq {

// {"calib", "calib_tokens", "calib_seq_len", "calib_seed", "gptq_block", "damp", "act_order"}
nlohmann::json gptq_options_record(const CalibOptions& calib, const GptqOptions& gptq);

// SHA-256 (hex) over the source path and config, the plan, the output dtype, the options record
// and `calib_sha256` (CalibSet::sha256 of the rows).
std::string gptq_resume_fingerprint(const ConvertJob& job, const CalibOptions& calib,
                                    const GptqOptions& gptq, const std::string& calib_sha256);

}  // namespace tq
