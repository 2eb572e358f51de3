// tq generate MODEL -p TEXT: text generation (fast runtime; --reference for the f32 one), streamed
// to stdout; greedy by default, or sampled (--temp, --top-p, --top-k, --seed). --chat wraps the
// prompt in the model's chat template; --lookup / --draft MODEL decode speculatively (the same
// tokens, fewer target forwards). Statistics go to stderr as one final line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/runtime_flags.h"
#include "cli/spec_flags.h"
#include "cli/verb.h"
#include "eval/bench.h"
#include "model/forward.h"
#include "model/generation.h"
#include "model/kv_blocks.h"
#include "model/model_chat.h"
#include "model/model_source.h"
#include "model/model_tokenizer.h"
#include "model/speculate.h"
#include "serve/prompt_cache.h"

namespace tq::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  int64_t max_tokens = 256;
  SamplingOptions sampling;
  bool chat = false;
  std::string system;
  bool has_system = false;
  bool json = false;
  SpecOptions spec;
  std::string prompt_cache;  // a prompt-cache directory (tq serve --prompt-cache-dir's store)
  RuntimeOptions runtime;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The prompt text: as given, or the conversation [system?, user] through the chat template.
Result<std::string> prompt_text(const GenerateOptions& o, const ModelSource& m,
                                const ModelChat& chat) {
  if (!o.chat) return o.prompt;
  auto prompter = ChatPrompter::make(chat);
  if (!prompter) return err("{}: {}; run without --chat", m.path, prompter.error().message);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (o.has_system) messages.push_back({{"role", "system"}, {"content", o.system}});
  messages.push_back({{"role", "user"}, {"content", o.prompt}});
  return prompter->render(messages);
}

nlohmann::json spec_json(const Speculator& s) {
  const SpecStats& st = s.stats();
  // Measured step times by positions checked (1: a plain step).
  nlohmann::json step_ms = nlohmann::json::object();
  for (int m = 1; m < StepCosts::kMax; ++m)
    if (s.costs().seconds(m) > 0) step_ms[std::to_string(m)] = s.costs().seconds(m) * 1e3;
  return {{"proposer", s.proposer().name()},
          {"steps", st.steps},
          {"checks", st.checks},
          {"proposed", st.proposed},
          {"accepted", st.accepted},
          {"acceptance", st.acceptance()},
          {"tokens_per_forward", st.tokens_per_step()},
          {"step_ms", step_ms}};
}

void write_out(const std::string& s) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// Prefill through the prompt cache in o.prompt_cache (tq serve's store and arithmetic): the
// leading blocks found there are copied in, the rest prefilled in the server's chunks, and the
// prompt's full blocks written back. Returns the tokens reused.
Result<int64_t> prefill_cached(const GenerateOptions& o, const ModelSource& m,
                               const Transformer& model, std::span<const int32_t> prompt,
                               KvCache& cache, std::span<float> logits) {
  constexpr int64_t kChunk = 128;  // tq serve's default --prefill-chunk
  TQ_TRY(KvBlockShape shape, kv_block_shape(cache, model.config()));
  TQ_TRY(serve::Digest fp,
         serve::prompt_cache_fingerprint(m.path, serve::prompt_cache_runtime(o.runtime)));
  TQ_TRY(auto pc, serve::PromptCache::open({fp, shape, o.prompt_cache, 0, TQ_VERSION}));
  const auto len = static_cast<int64_t>(prompt.size());
  const auto keys = pc->chain(prompt);
  const auto found = pc->lookup(prompt, keys, (len - 1) / serve::kBlockTokens);
  const int64_t h = serve::usable_cached_blocks(static_cast<int64_t>(found.size()), len);
  for (int64_t b = 0; b < h; ++b) kv_block_write(cache, shape, b, *found[b]);
  cache.n = h * serve::kBlockTokens;
  while (cache.n < len) {
    const int64_t end = std::min(len, (cache.n / kChunk + 1) * kChunk);
    const SeqStep step{.tokens = prompt.subspan(cache.n, end - cache.n),
                       .cache = &cache,
                       .logits = logits,
                       .prefill = true};
    TQ_CHECK_OK(model.forward_batch({&step, 1}));
  }
  for (int64_t b = 0; b < len / serve::kBlockTokens; ++b) {
    if (pc->touch(keys[b])) continue;
    auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(shape.bytes()));
    kv_block_read(cache, shape, b, *bytes);
    pc->insert(prompt, keys, b, std::move(bytes));
  }
  TQ_TRY(serve::Durable durable, pc->flush());
  (void)durable;
  return h * serve::kBlockTokens;
}

Status run_generate(const GenerateOptions& o) {
  TQ_CHECK_OK(validate(o.sampling));
  if (o.max_tokens < 1) return err("--max-tokens must be >= 1, got {}", o.max_tokens);
  if (o.has_system && !o.chat) return err("--system needs --chat");
  const auto t_load = Clock::now();
  TQ_TRY(ModelSource m, open_model(o.model));
  TQ_TRY(Tokenizer tok, load_model_tokenizer(m));
  TQ_TRY(ModelChat chat, load_model_chat(m));
  TQ_TRY(std::string text, prompt_text(o, m, chat));
  // A chat template writes its own BOS; a plain prompt gets the post-processor's (mlx-lm).
  std::vector<int32_t> prompt = tok.encode(text, /*add_special=*/!o.chat);
  if (prompt.empty()) return err("the prompt is empty after tokenization");
  // The server's arithmetic, so that blocks from tq serve and from here are the same bits.
  const RuntimeOptions rt = o.prompt_cache.empty() ? o.runtime : serve::server_runtime(o.runtime);
  TQ_TRY(auto model, Transformer::load(m, rt));
  const int64_t vocab = model->config().vocab_size;
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab)
      return err("{}: prompt token id {} is outside the model's vocabulary ({})", o.model, id,
                 vocab);
  }
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + o.max_tokens + o.spec.k;
  TQ_TRY(SpeculatorFactory make_spec, make_speculator_factory(o.spec, *model, tok, o.runtime));
  std::unique_ptr<Speculator> spec;
  if (make_spec) {
    TQ_TRY(spec, make_spec(capacity));
  }
  const double load_s = seconds_since(t_load);

  const int64_t k_max = spec ? o.spec.k : 0;
  KvCache cache = model->new_cache(capacity);
  std::vector<float> logits(static_cast<size_t>((k_max + 1) * vocab));
  const auto t_prefill = Clock::now();
  int64_t cached = 0;
  if (o.prompt_cache.empty()) {
    TQ_CHECK_OK(model->forward(prompt, cache, logits, /*all_logits=*/false));
  } else {
    TQ_TRY(cached, prefill_cached(o, m, *model, prompt, cache, logits));
  }
  const double prefill_s = seconds_since(t_prefill);

  // As mlx-lm prints generations: its BPE detokenizer drops the first leading space.
  Generation gen(tok, {.sampling = o.sampling,
                       .eos = end_token_ids(chat, tok),
                       .max_tokens = o.max_tokens,
                       .trim_leading_space = tok.byte_level_decoder()});
  std::string generated_text;
  std::vector<int32_t> history = prompt;
  const auto t_decode = Clock::now();
  TQ_CHECK_OK(
      decode_loop(*model, cache, gen, &history, logits, spec.get(), [&](std::string_view piece) {
        generated_text += piece;
        if (!o.json) write_out(std::string(piece));
      }));
  const std::string stop = gen.eos_seen() ? "eos" : "max_tokens";
  const double decode_s = seconds_since(t_decode);
  const int64_t n_gen = gen.count();
  const double prefill_tps = prefill_s > 0 ? static_cast<double>(prompt.size()) / prefill_s : 0;
  // Tokens after the first (which prefill gave) per second of decoding.
  const double decode_tps = decode_s > 0 ? static_cast<double>(n_gen - 1) / decode_s : 0;
  if (o.json) {
    nlohmann::json j = {{"prompt", text},
                        {"prompt_tokens", prompt},
                        {"tokens", gen.tokens()},
                        {"text", generated_text},
                        {"stop", stop},
                        {"load_s", load_s},
                        {"prefill_tok_s", prefill_tps},
                        {"decode_tok_s", decode_tps},
                        {"runtime", model->runtime_name()},
                        {"cpu", eval::cpu_json(cpu_info())}};
    if (spec) j["speculation"] = spec_json(*spec);
    write_out(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } else {
    write_out("\n");
  }
  std::string spec_line;
  if (spec) {
    const SpecStats& st = spec->stats();
    spec_line =
        fmt::format(" | {}: {}/{} proposals accepted, {:.2f} tokens per forward",
                    spec->proposer().name(), st.accepted, st.proposed, st.tokens_per_step());
  }
  if (!o.prompt_cache.empty())
    spec_line += fmt::format(" | prompt cache: {} tokens reused", cached);
  std::fprintf(stderr,
               "tq generate: prompt %zu tokens, %.1f tok/s | generated %lld tokens, %.1f tok/s | "
               "stop: %s | load %.2f s%s\n",
               prompt.size(), prefill_tps, static_cast<long long>(n_gen), decode_tps, stop.c_str(),
               load_s, spec_line.c_str());
  return ok_status();
}

const bool kRegistered = register_verb(
    {"generate", "Generate text from a prompt (greedy or sampled), optionally as a chat", 70,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<GenerateOptions>();
       app.add_option("model", o->model, "HF or MLX safetensors directory, or a GGUF file")
           ->required();
       app.add_option("-p,--prompt", o->prompt, "prompt text (the user message with --chat)")
           ->required();
       app.add_option("--max-tokens", o->max_tokens, "most tokens to generate")->default_val(256);
       app.add_option("--temp", o->sampling.temperature, "sampling temperature; 0 is greedy")
           ->default_val(0.0);
       app.add_option("--top-p", o->sampling.top_p, "nucleus sampling mass in (0, 1]; 1 is off")
           ->default_val(1.0);
       app.add_option("--top-k", o->sampling.top_k, "sample among the k most likely; 0 is off")
           ->default_val(0);
       app.add_option("--seed", o->sampling.seed,
                      "random seed (std::mt19937_64): same seed, same tokens")
           ->default_val(0);
       app.add_flag("--chat", o->chat, "apply the model's chat template to the prompt");
       app.add_option("--system", o->system, "system message (with --chat)")
           ->each([o](const std::string&) { o->has_system = true; });
       app.add_flag("--json", o->json,
                    "print one JSON object (prompt, token ids, text, speeds) instead of streaming");
       add_spec_flags(app, &o->spec);
       app.add_option("--prompt-cache", o->prompt_cache,
                      "reuse and keep the prompt's KV blocks in this directory (tq serve "
                      "--prompt-cache-dir's store; the server's arithmetic)");
       add_runtime_flags(app, &o->runtime);
       return [o] { return run_generate(*o); };
     }});

}  // namespace
}  // namespace tq::cli
