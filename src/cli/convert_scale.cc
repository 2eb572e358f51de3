#include "cli/convert_scale.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/comm.h"
#include "convert/channel_scale_run.h"
#include "eval/results_db.h"
#include "model/model_source.h"
#include "model/model_tokenizer.h"
#include "quant/calib.h"

namespace tq::cli {

namespace fs = std::filesystem;

Result<ScaledSource> scaled_source(const std::string& source,
                                   const std::optional<RotationOptions>& rotation,
                                   const QuantSpec& search_spec, DType dtype,
                                   const GptqArgs& calib_args) {
  TQ_TRY(ModelSource src, open_model(source));
  TQ_CHECK_OK(check_channel_scalable(src.config));
  TQ_TRY(const std::string fp, eval::model_fingerprint(src));
  TQ_TRY(Tokenizer tok, load_model_tokenizer(src));
  TQ_TRY(CalibSet calib, build_calib_set(tok, calib_options(calib_args)));
  ChannelScaleOptions o;
  o.spec = search_spec;
  o.dtype = dtype;
  std::string spec = quant_spec_str(search_spec);
  for (char& c : spec)
    if (c == ' ') c = '-';
  const std::string rot = rotation ? fmt::format("-rot-{}-{}-{}", rotation_kind_name(rotation->r1),
                                                 rotation_kind_name(rotation->r2), rotation->seed)
                                   : "";
  const fs::path dir = fs::path(eval::default_results_db_path()).parent_path() / "scaled" /
                       fmt::format("{:.16}{}-{}-{}-{:.12}-r{}", fp, rot, spec, dtype_name(dtype),
                                   calib.sha256, std::min(o.rows, calib.rows()));
  ScaledSource out;
  out.dir = dir.string();
  const fs::path meta = dir / "tq_metadata.json";
  std::error_code ec;
  if (!fs::exists(meta, ec)) {
    if (world().size() > 1)
      return err(
          "--channel-scale: {} is not prepared yet; run the conversion once without "
          "mpirun (the scaled model is kept and reused)",
          out.dir);
    fs::create_directories(dir.parent_path(), ec);
    if (ec) return err("{}: cannot create: {}", dir.parent_path().string(), ec.message());
    std::fprintf(stderr,
                 "tq convert: channel scaling: alpha searched at %s on %lld rows x %lld tokens; "
                 "the scaled f32 model goes to %s\n",
                 quant_spec_str(search_spec).c_str(),
                 static_cast<long long>(std::min(o.rows, calib.rows())),
                 static_cast<long long>(calib.seq_len), out.dir.c_str());
    o.log = [](const std::string& line) {
      std::fprintf(stderr, "tq convert: channel scaling: %s\n", line.c_str());
    };
    TQ_CHECK_OK(write_scaled_float(source, rotation, calib, o, out.dir));
  } else {
    std::fprintf(stderr, "tq convert: channel scaling: reusing %s\n", out.dir.c_str());
  }
  std::ifstream f(meta);
  nlohmann::json m = nlohmann::json::parse(f, nullptr, false);
  if (m.is_discarded() || !m.contains("transforms"))
    return err("{}: unreadable; remove the folder and run again", meta.string());
  out.record = {{"path", out.dir}, {"transforms", m["transforms"]}};
  return out;
}

}  // namespace tq::cli
