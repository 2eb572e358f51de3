// tq bench MODEL: prefill and decode speed, time to first token and peak RSS at chosen prompt
// lengths (random token ids), min/median/max over repeats, beside the decode roofline; with
// --lookup / --draft, decode of real prompts with and without speculation.
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <optional>

#include "cli/db_flags.h"
#include "cli/runtime_flags.h"
#include "cli/spec_flags.h"
#include "cli/verb.h"
#include "eval/bench.h"
#include "eval/spec_bench.h"
#include "model/forward.h"
#include "model/generation.h"
#include "model/model_chat.h"
#include "model/model_source.h"
#include "model/model_tokenizer.h"

namespace tq::cli {
namespace {

struct BenchCliOptions {
  std::string model;
  eval::BenchOptions bench;
  bool json = false;
  DbFlags db;
  RuntimeOptions runtime;
  SpecOptions spec;
  std::string spec_prompts;
  bool spec_ignore_eos = false;
};

// --spec-prompts: one prompt per line, a JSON string or an object with a "prompt" field.
Result<std::vector<std::string>> read_spec_prompts(const std::string& path) {
  if (path.empty()) return eval::default_spec_prompts();
  std::ifstream f(path);
  if (!f) return err("--spec-prompts {}: cannot open", path);
  std::vector<std::string> out;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_string())
      out.push_back(j.get<std::string>());
    else if (j.is_object() && j.contains("prompt") && j["prompt"].is_string())
      out.push_back(j["prompt"].get<std::string>());
    else
      return err("--spec-prompts {} line {}: not a JSON string or {{\"prompt\": ...}}", path, n);
  }
  if (out.empty()) return err("--spec-prompts {}: no prompts", path);
  return out;
}

// Speculative decode against plain on real prompts (the chat template's when the model has
// one): its JSON, after printing its table unless `json`.
Result<nlohmann::json> run_spec_part(const BenchCliOptions& o,
                                     const std::vector<std::string>& texts, const Tokenizer& tok,
                                     const ModelChat& chat, const Transformer& net) {
  auto prompter = ChatPrompter::make(chat);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> labels;
  for (const std::string& t : texts) {
    std::string text = t;
    if (prompter) {
      TQ_TRY(text,
             prompter->render(nlohmann::ordered_json::array({{{"role", "user"}, {"content", t}}})));
    }
    prompts.push_back(tok.encode(text, /*add_special=*/!prompter.ok()));
    std::string label = t.substr(0, std::min<size_t>(t.find_first_of("\n:"), 40));
    labels.push_back(label);
  }
  TQ_TRY(SpeculatorFactory make, make_speculator_factory(o.spec, net, tok, o.runtime));
  // Answers end where the chat template's end tokens say, as in tq generate --chat.
  const std::vector<int32_t> eos =
      prompter && !o.spec_ignore_eos ? end_token_ids(chat, tok) : std::vector<int32_t>();
  TQ_TRY(eval::SpecBenchResult r,
         eval::run_spec_bench(net, tok, prompts, labels, o.bench.gen, eos, o.bench.repeat, make,
                              [&](int64_t d, int64_t t) {
                                if (!o.json)
                                  fmt::print(stderr, "\rbench: speculation run {}/{}", d, t),
                                      std::fflush(stderr);
                              }));
  if (!o.json) {
    fmt::print(stderr, "\n");
    fmt::print(
        "speculation ({}, --spec-k {}): greedy decode of {} {} tokens, plain and speculative "
        "alternated, the same tokens\n",
        r.proposer, o.spec.k, eos.empty() ? "exactly" : "up to", o.bench.gen);
    fmt::print("{:<42} {:>6} {:>11} {:>11} {:>7} {:>11} {:>10}\n", "prompt", "tokens",
               "plain tok/s", "spec tok/s", "ratio", "acceptance", "tok/fwd");
    for (const eval::SpecBenchPrompt& p : r.prompts)
      fmt::print("{:<42} {:>6} {:>11.1f} {:>11.1f} {:>7.2f} {:>11.2f} {:>10.2f}\n", p.label,
                 p.tokens, p.plain_tok_s, p.spec_tok_s,
                 p.plain_tok_s > 0 ? p.spec_tok_s / p.plain_tok_s : 0.0, p.stats.acceptance(),
                 p.stats.tokens_per_step());
    fmt::print("median over prompts: {:.1f} vs {:.1f} tok/s ({:.2f}x)\n", r.plain_tok_s,
               r.spec_tok_s, r.spec_tok_s / r.plain_tok_s);
  }
  return eval::spec_bench_json(r);
}

Status run_bench_verb(const BenchCliOptions& o) {
  if (!o.spec.any() && !o.spec_prompts.empty())
    return err("--spec-prompts needs --lookup or --draft");
  TQ_TRY(ModelSource src, open_model(o.model));
  TQ_TRY(const std::string fingerprint, eval::model_fingerprint(src));
  std::optional<Tokenizer> tok;
  std::optional<ModelChat> chat;
  std::vector<std::string> texts;
  if (o.spec.any()) {
    TQ_TRY(texts, read_spec_prompts(o.spec_prompts));
    TQ_TRY(tok, load_model_tokenizer(src));
    TQ_TRY(chat, load_model_chat(src));
  }
  TQ_TRY(auto net, Transformer::load(src, o.runtime));
  src.tensors.reset();  // the network keeps what it needs
  if (o.spec.any()) TQ_CHECK_OK(check_speculation(*net));
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
    if (!o.spec.any()) fmt::print("{}\n", j.dump());
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
  if (o.spec.any()) {
    TQ_TRY(j["speculation"], run_spec_part(o, texts, *tok, *chat, *net));
    if (o.json) fmt::print("{}\n", j.dump());
  }
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
       add_spec_flags(app, &o->spec);
       app.add_flag("--spec-ignore-eos", o->spec_ignore_eos,
                    "with --lookup/--draft: decode exactly --gen tokens after each prompt, past "
                    "the answer's end token");
       app.add_option("--spec-prompts", o->spec_prompts,
                      "with --lookup/--draft: prompts (JSONL: a string or {\"prompt\": ...} per "
                      "line; default: three copy-heavy and three open-ended built in)");
       return [o] { return run_bench_verb(*o); };
     }});

}  // namespace
}  // namespace tq::cli
