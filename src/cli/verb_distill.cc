// tq distill SOURCE QUANTIZED -o DEST: trains a quantized model's affine scales and biases
// against its float source on calibration text (quant/distill.h) and writes a copy with them.
#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <memory>

#include "cli/convert_gptq.h"
#include "cli/distill_progress.h"
#include "cli/verb.h"
#include "convert/patched_checkpoint.h"
#include "io/checkpoint_dir.h"
#include "model/model_tokenizer.h"
#include "quant/distill.h"

namespace tq::cli {
namespace {

struct DistillArgs {
  std::vector<std::string> models;
  std::string output;
  DistillOptions opt;
  GptqArgs calib;  // only its --calib* fields
  bool force = false;
  std::string schedule = "cosine";
  std::string train_norms = "off";
  CLI::Option* calib_tokens = nullptr;  // given or not
  DistillArgs() { calib.calib_seq_len = kDistillSeqLen; }
};

std::string mmss(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

}  // namespace

std::function<void(const DistillProgress&)> distill_progress_printer(const char* prefix) {
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  struct State {
    std::chrono::steady_clock::time_point last;
    double elapsed = 0.0;
  };
  auto st = std::make_shared<State>();
  st->last = std::chrono::steady_clock::now() - std::chrono::seconds(60);
  std::string pre = prefix;
  return [tty, st, pre](const DistillProgress& p) {
    st->elapsed += p.seconds;
    const auto now = std::chrono::steady_clock::now();
    if (!tty && p.step != p.steps && now - st->last < std::chrono::seconds(10)) return;
    st->last = now;
    const double eta =
        st->elapsed / static_cast<double>(p.step) * static_cast<double>(p.steps - p.step);
    const std::string line =
        fmt::format("{}step {}/{}  loss {:.5f}  {:.1f} s/step  {} elapsed, ETA {}", pre, p.step,
                    p.steps, p.loss, p.seconds, mmss(st->elapsed), mmss(eta));
    if (tty)
      fmt::print(stderr, "\r{}\x1b[K{}", line, p.step == p.steps ? "\n" : "");
    else
      fmt::print(stderr, "{}\n", line);
  };
}

namespace {

Status run_distill(const DistillArgs& a) {
  if (a.models.size() != 2)
    return err("expected SOURCE (the float model) and QUANTIZED (an MLX directory made from it)");
  DistillOptions opt = a.opt;
  opt.schedule = a.schedule == "cosine";
  opt.train_norms = a.train_norms == "on";
  TQ_TRY(ModelSource student, open_model(a.models[1]));
  TQ_CHECK_OK(check_patch_dest(student.path, a.output, a.force));
  TQ_TRY(ModelSource teacher, open_model(a.models[0]));
  TQ_TRY(Tokenizer tok, load_model_tokenizer(student));
  CalibOptions co = calib_options(a.calib);
  if (a.calib_tokens->count() == 0) co.tokens = distill_calib_tokens(opt, co.seq_len);
  TQ_TRY(CalibSet calib, build_calib_set(tok, co));
  fmt::print(stderr,
             "tq distill: {} calibration rows x {} tokens (sha256 {}), {} held out; {} steps of "
             "{} rows, lr {:g}, temperature {:g}\n",
             calib.rows(), calib.seq_len, calib.sha256.substr(0, 12), a.opt.holdout_rows,
             a.opt.steps, a.opt.seqs_per_step, a.opt.lr, a.opt.temperature);
  auto progress = distill_progress_printer("tq distill: ");
  TQ_TRY(DistillResult r, distill_scales(teacher, student, calib, opt, progress));
  const auto* dir = dynamic_cast<const DirTensorSource*>(student.tensors.get());
  const nlohmann::json record = distill_record(teacher.path, student.path, opt, calib, r);
  TQ_CHECK_OK(write_patched_checkpoint(*dir, r.stored, {{"distill", record}}, a.output, a.force));
  fmt::print("distilled {} matrices ({} groups) and {} norm weights on {} tokens in {:.1f} s\n",
             r.tensors, r.groups, r.norms, r.train_tokens, r.seconds);
  if (a.opt.holdout_rows > 0)
    fmt::print("held-out KL(source||quantized): {:.5f} -> {:.5f} ({:+.1f}%) on {} rows\n",
               r.holdout_before, r.holdout_after,
               100.0 * (r.holdout_after / r.holdout_before - 1.0), a.opt.holdout_rows);
  fmt::print("wrote {}\n", a.output);
  return ok_status();
}

const bool kRegistered = register_verb(
    {"distill", "Train a quantized model's scales and biases against its float source (codes kept)",
     31, [](CLI::App& app) -> VerbRun {
       auto a = std::make_shared<DistillArgs>();
       app.add_option("models", a->models,
                      "SOURCE QUANTIZED: the float model, and an MLX directory quantized from it")
           ->required()
           ->expected(2);
       app.add_option("-o,--output", a->output, "Output directory (a copy with new scales)")
           ->required();
       app.add_option("--steps", a->opt.steps, "Optimizer steps (default 128)");
       app.add_option("--rows-per-step", a->opt.seqs_per_step,
                      "Calibration rows per step (default 1)");
       app.add_option("--lr", a->opt.lr,
                      "Adam's peak step, in units of each group's initial |scale| (default 0.001)");
       app.add_option("--temperature", a->opt.temperature,
                      "Softmax temperature of both models in the loss (default 1)");
       app.add_option("--holdout", a->opt.holdout_rows,
                      "Calibration rows kept out of training, for the before/after KL (default 4)");
       app.add_option("--calib", a->calib.calib,
                      "calibration text: a text file, or .jsonl with a \"text\" field "
                      "(repeatable; default the State of the Union corpus)");
       a->calib_tokens = app.add_option(
           "--calib-tokens", a->calib.calib_tokens,
           "calibration tokens (default: a new row for every step, and the held-out rows)");
       app.add_option("--calib-seq-len", a->calib.calib_seq_len,
                      "tokens per calibration row (default 256)");
       app.add_option("--calib-seed", a->calib.calib_seed, "row shuffle seed (default 123)");
       app.add_option("--schedule", a->schedule,
                      "cosine: warm up over the first tenth of the steps, then decay to zero; "
                      "constant: warm up, then constant (default cosine)")
           ->check(CLI::IsMember({"cosine", "constant"}));
       app.add_flag("--round-each-step", a->opt.round_each_step,
                    "every step's forward uses the scales rounded to their stored dtype "
                    "(straight through); default: trained in f32, rounded once when written");
       app.add_option("--train-norms", a->train_norms,
                      "on: also train every RMSNorm's weight, stored as a float (default off)")
           ->check(CLI::IsMember({"on", "off"}));
       app.add_flag("--force", a->force, "Replace an existing output directory");
       return [a] { return run_distill(*a); };
     }});

}  // namespace
}  // namespace tq::cli
