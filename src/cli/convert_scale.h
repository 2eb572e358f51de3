// `tq convert --channel-scale`: the scaled float model (convert/channel_scale_run.h) that the
// conversion then quantizes as its source, kept under the results database's folder by the
// source's fingerprint, rotation, search width and dtype, and calibration rows so a rerun
// reuses it.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "cli/convert_gptq.h"
#include "formats/quant_spec.h"
#include "rotate/fold_plan.h"

namespace tq::cli {

struct ScaledSource {
  std::string dir;        // the f32 model to quantize
  nlohmann::json record;  // for tq_metadata.json: path, rotation, the scales' summary
};

Result<ScaledSource> scaled_source(const std::string& source,
                                   const std::optional<RotationOptions>& rotation,
                                   const QuantSpec& search_spec, DType dtype,
                                   const GptqArgs& calib_args);

}  // namespace tq::cli
