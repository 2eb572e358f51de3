#include "cli/convert_gptq.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/byte_size.h"
#include "base/comm.h"
#include "convert/gptq_resume.h"
#include "convert/sensitivity_run.h"
#include "model/model_tokenizer.h"
#include "model/tensor_table.h"
#include "quant/calib.h"
#include "recipe/sensitivity.h"

namespace tq::cli {

namespace {

namespace fs = std::filesystem;

void print_progress(const GptqProgress& p) {
  const GptqResult& r = *p.result;
  std::string eta = p.eta_s >= 0 ? fmt::format("ETA {:.0f} s", p.eta_s) : "ETA ?";
  std::fprintf(stderr,
               "tq convert: gptq layer %lld/%lld · %s · loss %.4g (rtn %.4g) · damp %g%s · %.2f s "
               "· %s\n",
               static_cast<long long>(p.layer + 1), static_cast<long long>(p.layers),
               p.module.c_str(), r.proxy_loss, r.rtn_loss, r.damp,
               r.fallback ? " · RTN FALLBACK" : "", r.seconds, eta.c_str());
}

}  // namespace

void add_gptq_flags(CLI::App& app, GptqArgs* a) {
  app.add_flag("--gptq", a->enabled, "quantize decoder layers with GPTQ on calibration text");
  app.add_option("--calib", a->calib,
                 "calibration text: a text file, or .jsonl with a \"text\" field (repeatable; "
                 "default: the SOTU corpus in $TQ_CACHE)");
  app.add_option("--calib-tokens", a->calib_tokens, "calibration tokens (default 65536)");
  app.add_option("--calib-seq-len", a->calib_seq_len, "tokens per calibration row (default 512)");
  app.add_option("--calib-seed", a->calib_seed, "row shuffle seed (default 123)");
  app.add_option("--calib-save", a->calib_save,
                 "write the calibration rows as little-endian int32 [rows, seq-len]");
  app.add_option("--eval-text", a->eval_text,
                 "warn when calibration rows share 64-token windows with this text");
  app.add_option("--gptq-block", a->block, "lazy-update block width (default 128)");
  app.add_option("--damp", a->damp,
                 "initial damping, fraction of mean(diag H) (default 0.01; escalates x10 to 10)");
  app.add_flag("--act-order", a->act_order, "columns by decreasing H_ii (static groups)");
  app.add_option("--max-calib-memory", a->max_calib_memory,
                 "activations held in RAM; beyond it they spill to scratch files (default 2GiB)");
  app.add_option("--gptq-checkpoint", a->checkpoint,
                 "per-layer checkpoint directory (default DST.gptq-checkpoint)");
  app.add_flag("--resume", a->resume,
               "continue a killed --gptq run from its checkpoint (same source and options)");
  app.add_option("--gptq-recovery", a->recovery,
                 "with a target, scale the sensitivity table's RTN KLs by what GPTQ recovers "
                 "per role and width, measured first on 6 sampled layers: on or off (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--gptq-tied-head", a->tied_head,
                 "a tied embedding (the head too) by GPTQ on the head's input, its Hessian's "
                 "diagonal raised by this fraction of its mean for the lookup; 0: RTN (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gptq-asym", a->asym,
                 "fit each matrix to the float model's output on the float model's input, not "
                 "to its own output on the quantized model's input: on or off (default off)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--grid-refit", a->refit,
                 "after GPTQ, refit each row's scales and biases by least squares against the "
                 "Hessian: on or off (default off)")
      ->check(CLI::IsMember({"on", "off"}));
}

GptqOptions gptq_options(const GptqArgs& a) {
  GptqOptions g;
  g.block = a.block;
  g.damp = a.damp;
  g.act_order = a.act_order;
  g.grid = a.grid;
  g.refit = a.refit_on();
  g.asym = a.asym == "on";
  return g;
}

CalibOptions calib_options(const GptqArgs& a) {
  CalibOptions co;
  co.files = a.calib;
  co.tokens = a.calib_tokens;
  co.seq_len = a.calib_seq_len;
  co.seed = a.calib_seed;
  return co;
}

Result<GptqRecovery> measure_recovery(const GptqArgs& a, ConvertJob& job,
                                      const std::string& table_path) {
  TQ_TRY(SensitivityTable table, read_sensitivity(table_path));
  GptqRecoveryOptions ro;
  ro.gptq = gptq_options(a);
  ro.specs = network_specs(table.specs, table.scaled_above_bits);
  ro.tied_head_ridge = a.tied_head_ridge();
  GptqRecovery rec;
  rec.specs = ro.specs;
  Comm& comm = world();
  std::vector<double> flat;  // role, then one factor per spec, for each role
  if (comm.rank() == 0) {
    TQ_TRY(Tokenizer tok, load_model_tokenizer(job.source));
    TQ_TRY(CalibSet calib, build_calib_set(tok, calib_options(a)));
    std::fprintf(stderr,
                 "tq convert: gptq recovery: GPTQ against RTN at %zu spec(s) on %lld sampled "
                 "layers, %lld rows x %lld tokens\n",
                 ro.specs.size(),
                 static_cast<long long>(
                     std::min<int64_t>(ro.sample_layers, job.plan.config.num_hidden_layers)),
                 static_cast<long long>(std::min(ro.rows, calib.rows())),
                 static_cast<long long>(calib.seq_len));
    ro.log = [](const std::string& line) {
      std::fprintf(stderr, "tq convert: gptq recovery: %s\n", line.c_str());
    };
    TQ_TRY(rec, measure_gptq_recovery(job, calib, ro));
    std::string specs, line;
    for (const QuantSpec& q : rec.specs) specs += (specs.empty() ? "" : ", ") + quant_spec_str(q);
    for (const auto& [role, f] : rec.factor) {
      line += fmt::format("{}{}", line.empty() ? "" : "; ", tensor_role_name(role));
      for (double v : f) line += fmt::format(" {:.2f}", v);
      flat.push_back(static_cast<double>(role));
      flat.insert(flat.end(), f.begin(), f.end());
    }
    std::fprintf(stderr, "tq convert: gptq recovery (GPTQ/RTN loss at %s): %s (%.0f s)\n",
                 specs.c_str(), line.c_str(), rec.seconds);
  }
  if (comm.size() > 1) {
    TQ_CHECK_OK(broadcast_values(comm, 0, &flat));
    const size_t step = rec.specs.size() + 1;
    if (comm.rank() != 0)
      for (size_t i = 0; i + step <= flat.size(); i += step)
        rec.factor[static_cast<TensorRole>(static_cast<int>(flat[i]))] = {
            flat.begin() + static_cast<std::ptrdiff_t>(i + 1),
            flat.begin() + static_cast<std::ptrdiff_t>(i + step)};
  }
  return rec;
}

nlohmann::json gptq_options_record(const GptqArgs& a) {
  return tq::gptq_options_record(calib_options(a), gptq_options(a));
}

Result<GptqSetup> make_gptq(const GptqArgs& a, const ConvertJob& job, const ConvertOptions& o) {
  GptqDriverOptions d;
  TQ_TRY(const uint64_t calib_memory, parse_byte_size(a.max_calib_memory, "--max-calib-memory"));
  d.max_calib_memory = static_cast<int64_t>(calib_memory);
  TQ_TRY(Tokenizer tok, load_model_tokenizer(job.source));
  const CalibOptions co = calib_options(a);
  TQ_TRY(CalibSet calib, build_calib_set(tok, co));
  const bool root = world().rank() == 0;  // under mpirun only rank 0 reports and writes
  if (root)
    std::fprintf(stderr,
                 "tq convert: gptq calibration %lld rows x %lld tokens from %zu file(s), "
                 "sha256 %s\n",
                 static_cast<long long>(calib.rows()), static_cast<long long>(calib.seq_len),
                 calib.files.size(), calib.sha256.c_str());
  if (root && calib.rows() * calib.seq_len < a.calib_tokens)
    std::fprintf(stderr, "tq convert: warning: the calibration text has only %lld rows\n",
                 static_cast<long long>(calib.corpus_rows));
  if (root && !a.calib_save.empty()) {
    std::ofstream f(a.calib_save, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(calib.tokens.data()),
            static_cast<std::streamsize>(calib.tokens.size() * 4));
    if (!f.flush()) return err("{}: cannot write the calibration rows", a.calib_save);
  }
  if (root && !a.eval_text.empty()) {
    std::ifstream f(a.eval_text, std::ios::binary);
    if (!f) return err("{}: cannot open --eval-text", a.eval_text);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const CalibOverlap ov = calib_overlap(calib, tok.encode(text, false));
    if (ov.shared_windows > 0)
      std::fprintf(stderr,
                   "tq convert: warning: %lld of %lld 64-token windows of %s also occur in the "
                   "calibration rows\n",
                   static_cast<long long>(ov.shared_windows),
                   static_cast<long long>(ov.eval_windows), a.eval_text.c_str());
  }
  d.gptq = gptq_options(a);
  d.fingerprint = gptq_resume_fingerprint(job, co, d.gptq, calib.sha256);
  GptqSetup s;
  s.checkpoint_dir = a.checkpoint.empty() ? o.dest + ".gptq-checkpoint" : a.checkpoint;
  std::error_code ec;
  if (root && !a.resume && fs::exists(s.checkpoint_dir, ec)) {
    if (!fs::exists(fs::path(s.checkpoint_dir) / "state.json", ec))
      return err("{}: exists and is not a GPTQ checkpoint; remove it or pass --gptq-checkpoint",
                 s.checkpoint_dir);
    fs::remove_all(s.checkpoint_dir, ec);  // a stale checkpoint of an earlier run
  }
  d.checkpoint_dir = s.checkpoint_dir;
  d.scratch_dir = "";
  if (root) d.progress = print_progress;
  d.comm = &world();
  if (root && world().size() > 1)
    std::fprintf(stderr, "tq convert: gptq calibration rows over %d ranks (blocks of %lld rows)\n",
                 world().size(), static_cast<long long>(d.hessian_row_block));
  const ModelSource* src = &job.source;
  auto load_source = [src](TensorRole role) -> Result<FloatTensor> {
    for (const TensorKind& k : table_for(src->config))
      if (k.role == role) return src->tensors->load_f32(tensor_name(k, -1));
    return err("gptq: the source's tensor table has no {}", tensor_role_name(role));
  };
  TQ_TRY(s.quantizer, GptqQuantizer::create(job.plan.config, calib, std::move(d), load_source,
                                            o.record_timings, a.tied_head_ridge()));
  return s;
}

}  // namespace tq::cli
