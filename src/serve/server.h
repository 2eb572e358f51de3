// `tq serve`: the OpenAI-compatible HTTP server over the scheduler. run_server listens at once
// (GET /health/ready answers 503 while the model loads), serves until SIGINT or SIGTERM, then
// stops admitting (503), lets in-flight requests finish within drain_timeout_s, and returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/result.h"
#include "model/forward.h"
#include "serve/scheduler.h"

namespace tq::serve {

struct ServeOptions {
  std::string model;  // MLX dir, HF dir or GGUF file
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port (printed)
  int64_t ctx = 0;                 // tokens per sequence (0: the model's max_position_embeddings)
  std::string api_key;             // empty: no authentication
  std::string chat_template_file;  // a Jinja file in place of the model's template
  double drain_timeout_s = 30;
  uint64_t memory_budget = 0;  // bytes: weights, scratch and KV blocks (0: from free memory)
  size_t max_body_bytes = size_t{4} << 20;
  double upload_timeout_s = 30;    // a request body must arrive within this (408 after)
  double header_timeout_s = 10;    // request line and headers must arrive within this (408)
  double keep_alive_s = 5;         // longest silence on an open stream (an SSE comment then)
  bool prompt_cache = true;        // reuse cached prompt blocks (memory tier)
  std::string prompt_cache_dir;    // the disk tier: block files (empty: memory only)
  uint64_t prompt_cache_disk = 0;  // bytes the disk tier may hold (0: no bound)
  SchedulerOptions scheduler;
  RuntimeOptions runtime;
  SpecOptions spec;  // speculative decoding (--lookup / --draft)
};

Status run_server(const ServeOptions& o);

}  // namespace tq::serve
