// tq bench MODEL: prefill and decode speed, time to first token and peak RSS at chosen prompt
// lengths (random token ids), min/median/max over repeats, beside the decode roofline.
#include <fmt/format.h>

#include <memory>

#include "cli/db_flags.h"
#include "cli/runtime_flags.h"
#include "cli/verb.h"
#include "eval/bench.h"
#include "model/forward.h"
#include "model/model_source.h"

namespace tq::cli {
namespace {

struct BenchCliOptions {
  std::string model;
  eval::BenchOptions bench;
  bool json = false;
  DbFlags db;
  RuntimeOptions runtime;
};

Status run_bench_verb(const BenchCliOptions& o) {
  TQ_TRY(ModelSource src, open_model(o.model));
  const std::string fingerprint = eval::model_fingerprint(src);
  TQ_TRY(auto net, Transformer::load(src, o.runtime));
  src.tensors.reset();  // the network keeps what it needs
  TQ_TRY(eval::BenchResult r, eval::run_bench(*net, o.bench, [&](int64_t d, int64_t t) {
           if (!o.json) fmt::print(stderr, "\rbench: run {}/{}", d, t), std::fflush(stderr);
         }));
  if (!o.json) fmt::print(stderr, "\n");
  nlohmann::json j = eval::bench_json(r, o.bench);
  j["model"] = o.model;
  j["threads"] = net->threads();
  const std::string protocol = fmt::format(
      "bench: random prompts of {} tokens, greedy decode of {}, {} repeats, {} threads, {}",
      fmt::join(o.bench.prompt_lengths, "/"), o.bench.gen, o.bench.repeat, net->threads(),
      r.runtime);
  if (o.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{}\n{}\ncpu: {}\n", o.model, protocol, cpu_summary(r.cpu));
    fmt::print("{:>8} {:>28} {:>28} {:>22}\n", "prompt", "prefill tok/s (min/med/max)",
               "decode tok/s (min/med/max)", "TTFT s (median)");
    for (const eval::BenchPoint& p : r.points)
      fmt::print("{:>8} {:>8.1f} {:>8.1f} {:>8.1f}   {:>8.1f} {:>8.1f} {:>8.1f}   {:>20.4f}\n",
                 p.prompt_len, p.prefill_tok_s.min, p.prefill_tok_s.median, p.prefill_tok_s.max,
                 p.decode_tok_s.min, p.decode_tok_s.median, p.decode_tok_s.max, p.ttft_s.median);
    fmt::print(
        "decode roofline: {:.1f} tok/s = {:.2f} GB/s measured read bandwidth / {:.1f} MB per "
        "token\n",
        r.roofline_tok_s, r.bandwidth_bytes_s / 1e9, r.bytes_per_token / 1e6);
    fmt::print("peak RSS: {:.1f} MB\n", r.peak_rss_bytes / 1e6);
  }
  std::fflush(stdout);
  eval::RunRecord rec;
  rec.kind = "bench";
  rec.artifact = o.model;
  rec.model_fingerprint = fingerprint;
  rec.protocol = protocol;
  rec.result = j;
  return record_run(o.db, rec);
}

const bool kRegistered = register_verb(
    {"bench", "Prefill/decode speed, time to first token and peak memory of a model", 80,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<BenchCliOptions>();
       app.add_option("model", o->model, "HF or MLX safetensors directory, or a GGUF file")
           ->required();
       app.add_option("--prompt-lengths", o->bench.prompt_lengths,
                      "prompt lengths in tokens, comma-separated")
           ->delimiter(',')
           ->capture_default_str();
       app.add_option("--gen", o->bench.gen, "tokens decoded after each prompt")
           ->capture_default_str();
       app.add_option("--repeat", o->bench.repeat, "runs per prompt length")->capture_default_str();
       app.add_option("--seed", o->bench.seed, "seed of the random prompt tokens")
           ->capture_default_str();
       app.add_flag("--json", o->json, "Print one JSON object");
       add_db_flags(app, &o->db);
       add_runtime_flags(app, &o->runtime);
       return [o] { return run_bench_verb(*o); };
     }});

}  // namespace
}  // namespace tq::cli
