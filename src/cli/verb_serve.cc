// tq serve MODEL: the OpenAI-compatible HTTP server (serve/server.h) with the runtime flags.
#include <memory>

#include "base/byte_size.h"
#include "cli/runtime_flags.h"
#include "cli/spec_flags.h"
#include "cli/verb.h"
#include "serve/server.h"

namespace tq::cli {
namespace {

Status check(const serve::ServeOptions& o) {
  const auto& s = o.scheduler;
  if (o.port < 0 || o.port > 65535) return err("--port must be in [0, 65535], got {}", o.port);
  if (o.ctx < 0) return err("--ctx must be >= 0, got {}", o.ctx);
  if (s.max_seqs < 1) return err("--max-seqs must be >= 1, got {}", s.max_seqs);
  if (s.batch < 0) return err("--batch must be >= 0, got {}", s.batch);
  if (s.queue < 0) return err("--queue must be >= 0, got {}", s.queue);
  if (s.prefill_chunk < 1) return err("--prefill-chunk must be >= 1, got {}", s.prefill_chunk);
  if (s.step_tokens < 1) return err("--step-tokens must be >= 1, got {}", s.step_tokens);
  if (!(s.max_itl_factor == 0 || s.max_itl_factor >= 1))
    return err("--max-itl-factor must be 0 (off) or at least 1, got {}", s.max_itl_factor);
  if (s.prefill_burst < 0) return err("--prefill-burst must be >= 0, got {}", s.prefill_burst);
  if (!(o.drain_timeout_s >= 0)) return err("--drain-timeout must be >= 0");
  if (!(o.upload_timeout_s > 0)) return err("--upload-timeout must be > 0");
  if (!(o.header_timeout_s > 0)) return err("--header-timeout must be > 0");
  if (!(o.keep_alive_s > 0)) return err("--sse-keep-alive must be > 0");
  if (!o.prompt_cache_dir.empty() && !o.prompt_cache)
    return err("--prompt-cache-dir needs the prompt cache (drop --no-prompt-cache)");
  return ok_status();
}

const bool kRegistered = register_verb(
    {"serve", "OpenAI-compatible HTTP server (chat, completions, streaming, metrics)", 75,
     [](CLI::App& app) -> VerbRun {
       auto o = std::make_shared<serve::ServeOptions>();
       app.add_option("model", o->model, "HF or MLX safetensors directory, or a GGUF file")
           ->required();
       app.add_option("--host", o->host, "address to listen on")->capture_default_str();
       app.add_option("--port", o->port, "TCP port (0: any free one, printed)")
           ->capture_default_str();
       app.add_option("--ctx", o->ctx,
                      "tokens per sequence, prompt and completion (0: the model's context)")
           ->capture_default_str();
       app.add_option("--max-seqs", o->scheduler.max_seqs, "sequences running at once")
           ->capture_default_str();
       app.add_option("--batch", o->scheduler.batch,
                      "sequences per batched step (0: --max-seqs; 1: one request at a time)")
           ->capture_default_str();
       app.add_option("--queue", o->scheduler.queue,
                      "requests waiting beyond the free slots; more get 429")
           ->capture_default_str();
       app.add_option("--prefill-chunk", o->scheduler.prefill_chunk,
                      "prompt tokens per sequence and step")
           ->capture_default_str();
       app.add_option("--step-tokens", o->scheduler.step_tokens,
                      "tokens per step, decode and prefill (a prefill chunk at least)")
           ->capture_default_str();
       app.add_option("--max-itl-factor", o->scheduler.max_itl_factor,
                      "while streams decode, a step's prompt tokens are capped so the step takes "
                      "at most this many decode steps' time (0: off)")
           ->capture_default_str();
       app.add_option("--prefill-burst", o->scheduler.prefill_burst,
                      "a prompt of at most N tokens (past its cached prefix) goes in whole chunks "
                      "whatever --max-itl-factor; a longer one is capped (0: every chunk capped)")
           ->capture_default_str();
       app.add_option("--api-key", o->api_key,
                      "require 'Authorization: Bearer KEY' (except /health)")
           ->envname("TQ_API_KEY");
       app.add_option("--drain-timeout", o->drain_timeout_s,
                      "seconds in-flight requests may finish after SIGINT/SIGTERM")
           ->capture_default_str();
       app.add_option_function<std::string>(
           "--memory-budget",
           [o](const std::string& v) {
             auto b = parse_byte_size(v, "--memory-budget");
             if (!b) throw CLI::ValidationError(b.error().message);
             o->memory_budget = *b;
           },
           "bytes for weights, scratch and KV blocks, e.g. 4GiB (default: 90% of free memory)");
       app.add_option("--chat-template", o->chat_template_file,
                      "a Jinja chat template file in place of the model's")
           ->check(CLI::ExistingFile);
       app.add_option("--upload-timeout", o->upload_timeout_s,
                      "seconds a request body may take to arrive (then 408)")
           ->capture_default_str();
       app.add_option("--header-timeout", o->header_timeout_s,
                      "seconds a request line and its headers may take to arrive (then 408)")
           ->capture_default_str();
       app.add_option("--sse-keep-alive", o->keep_alive_s,
                      "longest silence on a stream, in seconds (then an SSE comment)")
           ->capture_default_str();
       app.add_flag("!--no-prompt-cache", o->prompt_cache,
                    "do not reuse the KV blocks of earlier prompts' shared prefixes");
       app.add_option("--prompt-cache-dir", o->prompt_cache_dir,
                      "keep prompt-cache blocks as files here (flushed on SIGINT/SIGTERM and "
                      "POST /admin/cache/flush; found again after a restart)");
       app.add_option_function<std::string>(
           "--prompt-cache-disk",
           [o](const std::string& v) {
             auto b = parse_byte_size(v, "--prompt-cache-disk");
             if (!b) throw CLI::ValidationError(b.error().message);
             o->prompt_cache_disk = *b;
           },
           "bytes the --prompt-cache-dir files may take, e.g. 20GiB (default: no bound)");
       add_runtime_flags(app, &o->runtime);
       add_spec_flags(app, &o->spec);
       return [o]() -> Status {
         TQ_CHECK_OK(check(*o));
         return serve::run_server(*o);
       };
     }});

}  // namespace
}  // namespace tq::cli
