#include "serve/server.h"

#include <httplib.h>
#include <malloc.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>

#include "base/byte_size.h"
#include "base/proc_memory.h"
#include "model/kv_blocks.h"
#include "model/model_chat.h"
#include "model/model_source.h"
#include "model/model_tokenizer.h"
#include "serve/http_server.h"
#include "serve/logprobs.h"
#include "serve/peer_socket.h"
#include "serve/plan.h"
#include "serve/request.h"
#include "serve/responses.h"
#include "serve/tool_calls.h"

namespace tq::serve {
namespace {

using json = nlohmann::json;
using httplib::Request;
using httplib::Response;

constexpr auto kPoll = std::chrono::milliseconds(20);  // how often a waiting handler looks up
constexpr size_t kMaxHeadBytes = size_t{64} << 10;     // request line and headers together

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_body(e)), "application/json");
}

void send_json(Response& res, const json& j) {
  res.status = 200;
  res.set_content(dump(j), "application/json");
}

ApiError unavailable(std::string why) {
  return ApiError{503, std::move(why), "server_error", std::nullopt, "service_unavailable"};
}

// Same time whatever prefix of the key matches.
bool same_key(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % (b.empty() ? 1 : b.size())];
  return diff == 0 && !b.empty();
}

enum class Phase : int { kLoading, kReady, kDraining };

class Service {
 public:
  explicit Service(const ServeOptions& o) : o_(o) {}

  Status load_text(const ModelSource& m) {
    namespace fs = std::filesystem;
    fs::path p(o_.model);
    if (!p.has_filename()) p = p.parent_path();
    info_.id = p.filename().string();
    TQ_TRY(Tokenizer tok, load_model_tokenizer(m));
    tok_.emplace(std::move(tok));
    TQ_TRY(ModelChat chat, load_model_chat(m));
    if (!o_.chat_template_file.empty()) {
      std::ifstream f(o_.chat_template_file, std::ios::binary);
      if (!f) return err("cannot read --chat-template {}", o_.chat_template_file);
      chat.chat_template = std::string(std::istreambuf_iterator<char>(f), {});
      chat.template_source = o_.chat_template_file;
    }
    if (auto pr = ChatPrompter::make(chat); pr.ok()) {
      prompter_.emplace(std::move(pr).value());
      info_.prompter = &*prompter_;
    } else {
      std::fprintf(stderr, "tq serve: warning: %s; /v1/chat/completions will answer 400\n",
                   pr.error().message.c_str());
    }
    info_.tokenizer = &*tok_;
    info_.eos = end_token_ids(chat, *tok_);
    return ok_status();
  }

  Status load_model(const ModelSource& m) {
    // A request's tokens must not depend on what shares its batch (forward.h batch_invariant).
    // Prepacked by default: a step of several rows reads each strip once for all of them
    // (bench/README, `tq serve` at a few concurrencies), and `--batch 1` keeps the same kernels,
    // so its tokens stay those of the batched server.
    const RuntimeOptions rt = server_runtime(o_.runtime);
    TQ_TRY(model_, Transformer::load(m, rt));
    const auto& cfg = model_->config();
    info_.vocab = cfg.vocab_size;
    info_.ctx = o_.ctx > 0                        ? o_.ctx
                : cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings
                                                  : 4096;
    SchedulerOptions so = o_.scheduler;
    TQ_TRY(so.speculate, make_speculator_factory(o_.spec, *model_, *tok_, o_.runtime));
    TQ_TRY(so.kv_blocks, plan_memory());
    info_.kv_blocks = so.kv_blocks;
    TQ_CHECK_OK(open_prompt_cache(m));
    so.prompt_cache = cache_.get();
    metrics_.prompt_cache = cache_.get();
    scheduler_ = std::make_unique<Scheduler>(*model_, *tok_, so, metrics_);
    phase_ = Phase::kReady;
    return ok_status();
  }

  // The prompt cache, when on and the model allows it (a log line says why not).
  Status open_prompt_cache(const ModelSource& m) {
    if (!o_.prompt_cache) return ok_status();
    auto off = [](const std::string& why) {
      std::fprintf(stderr, "tq serve: prompt cache off: %s\n", why.c_str());
      return ok_status();
    };
    auto shape = kv_block_shape(model_->new_cache(kKvBlock), model_->config());
    if (!shape.ok()) return off(shape.error().message);
    if (o_.scheduler.prefill_chunk < kKvBlock)
      return off("--prefill-chunk is below 16 (cached blocks need whole-block prefill chunks)");
    const auto t0 = Clock::now();
    TQ_TRY(Digest fp, prompt_cache_fingerprint(m.path, prompt_cache_runtime(o_.runtime)));
    PromptCacheOptions po{fp, *shape, o_.prompt_cache_dir, o_.prompt_cache_disk, TQ_VERSION};
    TQ_TRY(cache_, PromptCache::open(po));
    const PromptCacheStats st = cache_->stats();
    std::fprintf(stderr,
                 "tq serve: prompt cache: blocks of %lld positions, %s each, in the KV budget%s "
                 "(fingerprint %.0f ms)\n",
                 static_cast<long long>(kKvBlock), format_bytes(shape->bytes()).c_str(),
                 o_.prompt_cache_dir.empty()
                     ? ""
                     : fmt::format("; disk {}: {} blocks ({}) found, {} interrupted writes removed",
                                   o_.prompt_cache_dir, st.disk_blocks, format_bytes(st.disk_bytes),
                                   st.interrupted)
                           .c_str(),
                 std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    return ok_status();
  }
  // Writes every dirty block (the durability boundary); what is on disk now.
  Result<Durable> flush_cache() {
    if (!cache_) return Durable{};
    return cache_->flush();
  }
  bool has_disk_cache() const { return cache_ && cache_->has_disk(); }

  // Splits the memory budget: what the process holds after a warm-up step at the largest step
  // size (weights, scratch), per-sequence buffers, and the rest as KV blocks (returned).
  Result<int64_t> plan_memory() {
    const uint64_t budget = o_.memory_budget > 0 ? o_.memory_budget : default_budget_;
    const int64_t step = std::min<int64_t>(o_.scheduler.step_tokens, info_.ctx);
    {
      KvCache warm = model_->new_cache(step);
      std::vector<int32_t> ids(static_cast<size_t>(step), 0);
      std::vector<float> logits(static_cast<size_t>(info_.vocab));
      TQ_CHECK_OK(model_->forward(ids, warm, logits, /*all_logits=*/false));
    }
    const uint64_t held = std::max(resident_bytes(), peak_resident_bytes());
    // Each sequence's logits (and the raw copy logprobs take) and recurrent state, a choice's
    // fork too; a margin for the allocator and the HTTP threads.
    // A sequence's recurrent state (hybrid models: DeltaNet conv and ssm states) is the same
    // size at every length; the blocks are what grows.
    const auto state = static_cast<uint64_t>(model_->new_cache(0).bytes());
    // With speculation a decode row's logits are k + 1 rows, here and in the runtime's gather.
    const uint64_t rows = o_.spec.any() ? 2 * static_cast<uint64_t>(o_.spec.k + 1) : 1;
    const uint64_t per_seq =
        (rows + 1) * sizeof(float) * static_cast<uint64_t>(info_.vocab) + state;
    const uint64_t fixed =
        held + per_seq * static_cast<uint64_t>(o_.scheduler.max_seqs + 8) + (uint64_t{32} << 20);
    const uint64_t block = static_cast<uint64_t>(
        std::max<int64_t>(1, model_->new_cache(kKvBlock).bytes() - static_cast<int64_t>(state)));
    if (budget < fixed + block)
      return err("--memory-budget {} is below what the model needs: {} for weights and scratch",
                 format_bytes(budget), format_bytes(fixed));
    const auto blocks = static_cast<int64_t>((budget - fixed) / block);
    metrics_.memory_budget = static_cast<int64_t>(budget);
    metrics_.kv_blocks_total = blocks;
    metrics_.memory_fixed = static_cast<int64_t>(fixed);
    metrics_.kv_block_bytes = static_cast<int64_t>(block);
    std::fprintf(stderr,
                 "tq serve: memory budget %s%s: weights and scratch %s, KV %lld blocks of %lld "
                 "positions (%s, %lld tokens)\n",
                 format_bytes(budget).c_str(), o_.memory_budget > 0 ? "" : " (90% of free memory)",
                 format_bytes(fixed).c_str(), static_cast<long long>(blocks),
                 static_cast<long long>(kKvBlock), format_bytes(blocks * block).c_str(),
                 static_cast<long long>(blocks * kKvBlock));
    return blocks;
  }
  // Read before anything is loaded: 90% of what is free now plus what this process holds.
  void note_free_memory() {
    default_budget_ = (available_memory_bytes() + resident_bytes()) / 10 * 9;
  }

  void install(httplib::Server& svr);
  Phase phase() const { return phase_; }
  void drain() { phase_ = Phase::kDraining; }
  bool idle() const { return !scheduler_ || scheduler_->idle(); }
  void shutdown() {
    if (scheduler_) scheduler_->shutdown();
  }
  const ModelInfo& info() const { return info_; }
  const std::string& runtime_name() const { return runtime_name_; }
  void set_runtime_name() { runtime_name_ = model_->runtime_name(); }

 private:
  void completion(const Request& req, Response& res, const httplib::ContentReader& reader,
                  Endpoint ep);
  std::string next_id(Endpoint ep) {
    return fmt::format("{}{:016x}", ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-",
                       (uint64_t{static_cast<uint64_t>(std::time(nullptr))} << 24) + ++ids_);
  }

  const ServeOptions& o_;
  std::atomic<Phase> phase_{Phase::kLoading};
  std::optional<Tokenizer> tok_;
  std::optional<ChatPrompter> prompter_;
  ModelInfo info_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<PromptCache> cache_;  // before the scheduler, which uses it
  std::unique_ptr<Scheduler> scheduler_;
  Metrics metrics_;
  std::atomic<uint64_t> ids_{0};
  std::string runtime_name_;
  uint64_t default_budget_ = 0;
};

// The body, read within the upload time limit and the size limit (a slow or endless upload
// cannot hold a thread: cpp-httplib's read timeout applies to each read only; the connection's
// stream stops reading at the same limit when nothing arrives).
std::optional<ApiError> read_body(const Request& req, const httplib::ContentReader& reader,
                                  const ServeOptions& o, std::string& body) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(o.upload_timeout_s);
  bool late = false, large = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (Clock::now() > deadline) return !(late = true);
    if (body.size() + n > o.max_body_bytes) return !(large = true);
    body.append(data, n);
    return true;
  });
  // cpp-httplib refuses an announced length over the limit before reading any of it.
  const std::string announced = req.get_header_value("Content-Length");
  if (!ok && !announced.empty() && std::strtoull(announced.c_str(), nullptr, 10) > o.max_body_bytes)
    large = true;
  if (late || (!ok && !large &&
               (Clock::now() > deadline || HttpServer::read_limit() == ReadLimit::kBodyTimeout)))
    return ApiError{408, fmt::format("the body did not arrive within {} s", o.upload_timeout_s),
                    "invalid_request_error", std::nullopt, "request_timeout"};
  if (large)
    return ApiError{413, fmt::format("the body is larger than {} bytes", o.max_body_bytes),
                    "invalid_request_error", std::nullopt, "request_too_large"};
  if (!ok)
    return ApiError{400, "the body ended before its announced length", "invalid_request_error",
                    std::nullopt, "bad_request"};
  return std::nullopt;
}

void Service::completion(const Request& req, Response& res, const httplib::ContentReader& reader,
                         Endpoint ep) {
  std::string body;
  if (auto e = read_body(req, reader, o_, body)) {
    res.set_header("Connection", "close");  // what is left of the body is not read
    return send_error(res, *e);
  }
  if (phase_ != Phase::kReady)
    return send_error(res, unavailable(phase_ == Phase::kLoading ? "the model is loading"
                                                                 : "the server is shutting down"));
  auto parsed = parse_completion_request(body, ep);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  const CompletionRequest& r = std::get<CompletionRequest>(parsed);
  auto planned = plan_job(r, info_, next_id(ep));
  if (auto* e = std::get_if<ApiError>(&planned)) return send_error(res, *e);
  std::shared_ptr<Job> job = std::get<std::shared_ptr<Job>>(planned);
  if (!scheduler_->submit(job)) {
    if (phase_ != Phase::kReady) return send_error(res, unavailable("the server is shutting down"));
    res.set_header("Retry-After", "1");
    return send_error(res, ApiError{429, "the server's queue is full; retry later",
                                    "rate_limit_error", std::nullopt, "queue_full"});
  }
  const int fd = HttpServer::current_socket();
  const ResponseHead head{job->id, info_.id, static_cast<int64_t>(std::time(nullptr)), ep};
  const auto prompt_tokens = static_cast<int64_t>(job->prompt.size());
  // echo: the prompt's text before each choice's completion.
  std::string echo;
  if (r.echo) echo = r.prompt_is_ids ? tok_->decode(r.prompt_ids) : r.prompt_text;
  const Tokenizer* tok = &*tok_;
  const bool logprobs = job->top_logprobs >= 0;
  auto logprobs_json = [tok, ep](std::span<const TokenLogprob> lps, size_t offset) {
    return ep == Endpoint::kChat ? chat_logprobs_json(*tok, lps)
                                 : completion_logprobs_json(*tok, lps, offset);
  };

  if (!r.stream) {
    std::vector<ChoiceResult> choices(static_cast<size_t>(job->n));
    std::vector<std::vector<TokenLogprob>> lps(choices.size());
    for (auto& c : choices) c.text = echo;
    for (;;) {
      JobOutput out = job->take(kPoll);
      for (size_t i = 0; i < choices.size(); ++i) {
        choices[i].text += out.choices[i].text;
        for (auto& lp : out.choices[i].logprobs) lps[i].push_back(std::move(lp));
      }
      if (out.done) {
        if (out.finish_reason == "error")
          return send_error(
              res, ApiError{500, out.error, "server_error", std::nullopt, "internal_error"});
        if (out.finish_reason == "cancelled")
          return send_error(res, unavailable(out.error.empty() ? "cancelled" : out.error));
        for (size_t i = 0; i < choices.size(); ++i) {
          auto& c = choices[i];
          c.finish_reason = out.choices[i].finish_reason;
          if (logprobs) c.logprobs = logprobs_json(lps[i], echo.size());
          if (!job->tool_calls) continue;
          ToolCallParser parser;
          ToolCallPieces a = parser.feed(c.text), b = parser.finish();
          c.text = a.content + b.content;
          for (auto& call : b.calls) a.calls.push_back(std::move(call));
          if (a.calls.empty()) continue;
          c.tool_calls = tool_calls_json(a.calls, job->id, static_cast<int>(i), 0, false);
          if (c.finish_reason == "stop") c.finish_reason = "tool_calls";
        }
        return send_json(res, completion_body(head, choices, prompt_tokens, out));
      }
      if (peer_gone(fd)) {  // nobody to answer: free the sequence at the next step
        job->cancelled = true;
        return send_error(res, unavailable("the client went away"));
      }
    }
  }

  // What one stream has sent so far.
  struct StreamState {
    bool first = true;
    std::vector<bool> finished;         // per choice: its finish chunk went out
    std::vector<size_t> offset;         // per choice: bytes of text sent (completions' text_offset)
    std::vector<ToolCallParser> tools;  // per choice, when the answer's calls are parsed out
    Clock::time_point last_write = Clock::now();
  };
  auto st = std::make_shared<StreamState>();
  st->finished.assign(static_cast<size_t>(job->n), false);
  st->offset.assign(static_cast<size_t>(job->n), echo.size());
  if (job->tool_calls) st->tools.resize(static_cast<size_t>(job->n));
  const bool usage = r.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, head, usage, prompt_tokens, fd, st, echo, logprobs, logprobs_json,
       keep_alive = std::chrono::duration<double>(o_.keep_alive_s)](size_t,
                                                                    httplib::DataSink& sink) {
        auto write = [&](const std::string& ev) {
          st->last_write = Clock::now();
          return sink.write(ev.data(), ev.size());
        };
        auto send = [&](const json& j) { return write(sse_event(j)); };
        auto give_up = [&] {  // the client is gone: free the sequence at the next step
          job->cancelled = true;
          return false;
        };
        const bool chat = head.endpoint == Endpoint::kChat;
        if (st->first) {  // each choice's role (chat) or echoed prompt (completions) first
          st->first = false;
          const std::string empty;
          for (int i = 0; i < job->n; ++i) {
            ChunkDelta d{.index = i, .first = true, .text = chat ? &empty : &echo};
            if ((chat || !echo.empty()) && !send(chunk_body(head, d, usage))) return give_up();
          }
        }
        JobOutput out = job->take(kPoll);
        for (int i = 0; i < job->n; ++i) {
          const auto ui = static_cast<size_t>(i);
          auto& c = out.choices[ui];
          const bool normal = c.finish_reason == "stop" || c.finish_reason == "length";
          const bool ends = c.done && normal && !st->finished[ui];
          std::string text = std::move(c.text);
          json calls;
          int first_call = 0;
          if (!st->tools.empty()) {  // calls out of the text; a possible call held back
            first_call = st->tools[ui].calls();
            ToolCallPieces a = st->tools[ui].feed(text);
            if (ends) {
              ToolCallPieces b = st->tools[ui].finish();
              a.content += b.content;
              for (auto& call : b.calls) a.calls.push_back(std::move(call));
            }
            text = std::move(a.content);
            if (!a.calls.empty()) calls = tool_calls_json(a.calls, job->id, i, first_call, true);
          }
          if (!text.empty() || !c.logprobs.empty() || !calls.is_null()) {
            json lp;
            if (logprobs) lp = logprobs_json(c.logprobs, st->offset[ui]);
            st->offset[ui] += text.size();
            ChunkDelta d{.index = i, .text = &text};
            if (!calls.is_null()) d.tool_calls = &calls;
            if (chat && text.empty() && !calls.is_null()) d.text = nullptr;
            if (logprobs) d.logprobs = &lp;
            if (!send(chunk_body(head, d, usage))) return give_up();
          }
          if (ends) {
            st->finished[ui] = true;
            std::string reason = c.finish_reason;
            if (reason == "stop" && !st->tools.empty() && st->tools[ui].calls() > 0)
              reason = "tool_calls";
            if (!send(chunk_body(head, ChunkDelta{.index = i, .finish_reason = &reason}, usage)))
              return give_up();
          }
        }
        if (!out.done) {
          if (peer_gone(fd)) return give_up();
          // A comment line now and then: proxies and clients keep a long prefill's stream open.
          if (Clock::now() - st->last_write > keep_alive && !write(": keep-alive\n\n"))
            return give_up();
          return true;
        }
        if (out.finish_reason == "error" || out.finish_reason == "cancelled") {
          const int status = out.finish_reason == "error" ? 500 : 503;
          send(error_body(ApiError{status, out.error.empty() ? out.finish_reason : out.error,
                                   "server_error", std::nullopt, out.finish_reason}));
        } else if (usage) {
          send(usage_chunk_body(head, prompt_tokens, out));
        }
        static const std::string kDone = "data: [DONE]\n\n";
        sink.write(kDone.data(), kDone.size());
        sink.done();
        return true;
      },
      [job](bool) { job->cancelled = true; });  // a no-op once it is done
}

void Service::install(httplib::Server& svr) {
  svr.set_pre_routing_handler([this](const Request& req, Response& res) {
    HttpServer::head_done();  // the head arrived in time; the body's deadline starts
    if (o_.api_key.empty() || req.path == "/health" || req.path == "/health/ready")
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string want = "Bearer " + o_.api_key;
    if (same_key(auth, want)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError{401,
                             auth.empty() ? "missing API key (Authorization: Bearer KEY)"
                                          : "wrong API key",
                             "invalid_request_error", std::nullopt, "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });
  // cpp-httplib's own refusals (no route, body too large, bad request line) in OpenAI's shape.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const Request& req,
                                                                    Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e{res.status, "bad request", "invalid_request_error", std::nullopt, "bad_request"};
    const ReadLimit limit = HttpServer::read_limit();
    if (limit == ReadLimit::kHeadTimeout || limit == ReadLimit::kBodyTimeout) {
      e = ApiError{408,
                   limit == ReadLimit::kHeadTimeout
                       ? fmt::format("the request line and headers did not arrive within {} s",
                                     o_.header_timeout_s)
                       : fmt::format("the body did not arrive within {} s", o_.upload_timeout_s),
                   "invalid_request_error", std::nullopt, "request_timeout"};
    } else if (limit == ReadLimit::kHeadTooLarge) {
      e = ApiError{
          431, fmt::format("the request line and headers are larger than {} bytes", kMaxHeadBytes),
          "invalid_request_error", std::nullopt, "request_header_fields_too_large"};
    }
    if (limit != ReadLimit::kNone) {
      res.status = e.status;
      res.set_header("Connection", "close");  // the connection reads no further
    } else if (res.status == 404) {
      e.message = fmt::format("no route {} {}", req.method, req.path);
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = fmt::format("the body is larger than {} bytes", o_.max_body_bytes);
      e.code = "request_too_large";
    } else if (res.status >= 500) {
      e.message = "internal error";
      e.type = "server_error";
      e.code = "internal_error";
    }
    res.set_content(dump(error_body(e)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError{500, what, "server_error", std::nullopt, "internal_error"});
  });
  svr.set_logger([this](const Request&, const Response& res) { metrics_.count_http(res.status); });

  svr.Get("/health", [](const Request&, Response& res) { send_json(res, {{"status", "ok"}}); });
  svr.Get("/health/ready", [this](const Request&, Response& res) {
    if (phase_ == Phase::kReady) return send_json(res, {{"status", "ready"}});
    send_error(res, unavailable(phase_ == Phase::kLoading ? "loading" : "draining"));
  });
  svr.Get("/metrics", [this](const Request&, Response& res) {
    res.set_content(metrics_.prometheus(), "text/plain; version=0.0.4");
  });
  auto model_json = [this] {
    return json{{"id", info_.id},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "turboquant"},
                {"max_model_len", info_.ctx}};
  };
  svr.Get("/v1/models", [model_json](const Request&, Response& res) {
    send_json(res, {{"object", "list"}, {"data", json::array({model_json()})}});
  });
  svr.Get(R"(/v1/models/(.+))", [this, model_json](const Request& req, Response& res) {
    if (req.matches[1] == info_.id) return send_json(res, model_json());
    send_error(res,
               ApiError{404, fmt::format("The model '{}' does not exist", req.matches[1].str()),
                        "invalid_request_error", "model", "model_not_found"});
  });
  svr.Post("/v1/chat/completions",
           [this](const Request& req, Response& res, const httplib::ContentReader& reader) {
             completion(req, res, reader, Endpoint::kChat);
           });
  svr.Post("/v1/completions",
           [this](const Request& req, Response& res, const httplib::ContentReader& reader) {
             completion(req, res, reader, Endpoint::kCompletion);
           });
  // The durability boundary: every dirty block written; answers what is on disk now.
  svr.Post("/admin/cache/flush", [this](const Request&, Response& res) {
    if (!has_disk_cache())
      return send_error(res, ApiError{400, "the server has no --prompt-cache-dir to flush to",
                                      "invalid_request_error", std::nullopt, "no_cache_dir"});
    auto d = flush_cache();
    if (!d.ok())
      return send_error(
          res, ApiError{500, d.error().message, "server_error", std::nullopt, "internal_error"});
    send_json(res,
              {{"durable", {{"blocks", d->blocks}, {"tokens", d->tokens}, {"bytes", d->bytes}}},
               {"written", d->written}});
  });
  svr.Post("/tokenize", [this](const Request& req, Response& res) {
    auto r = parse_tokenize_request(req.body);
    if (auto* e = std::get_if<ApiError>(&r)) return send_error(res, *e);
    const auto& t = std::get<TokenizeRequest>(r);
    send_json(res, {{"tokens", tok_->encode(t.content, t.add_special)}});
  });
  svr.Post("/detokenize", [this](const Request& req, Response& res) {
    auto r = parse_detokenize_request(req.body);
    if (auto* e = std::get_if<ApiError>(&r)) return send_error(res, *e);
    const auto& ids = std::get<std::vector<int32_t>>(r);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= tok_->vocab_size())
        return send_error(
            res, bad_request(fmt::format("tokens[{}]", i), "invalid_value",
                             fmt::format("token id {} is outside the vocabulary", ids[i])));
    send_json(res, {{"content", tok_->decode(ids)}});
  });
}

// SIGINT/SIGTERM set a flag the main thread polls (a handler, not sigwait: threads that
// libraries start before main, such as OpenBLAS's, do not block signals).
volatile sig_atomic_t g_signalled = 0;
void on_signal(int) { g_signalled = 1; }

bool wait_for_signal(const std::atomic<bool>& failed) {
  while (!failed && !g_signalled) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return g_signalled != 0;
}

}  // namespace

Status run_server(const ServeOptions& o) {
  g_signalled = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a death
  // KV caches and cached blocks (hundreds of KiB each) get their own mappings, returned when
  // freed: glibc's adaptive threshold would move them into the heap, where freed ones can stay
  // resident beyond the budget.
  mallopt(M_MMAP_THRESHOLD, 128 << 10);

  TQ_TRY(ModelSource m, open_model(o.model));
  Service service(o);
  service.note_free_memory();
  TQ_CHECK_OK(service.load_text(m));

  HttpServer svr(HttpLimits{o.header_timeout_s, o.upload_timeout_s, kMaxHeadBytes});
  const size_t threads = static_cast<size_t>(o.scheduler.max_seqs + o.scheduler.queue) + 8;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(o.max_body_bytes);
  svr.set_read_timeout(10, 0);
  svr.set_write_timeout(10, 0);
  svr.set_keep_alive_timeout(5);
  service.install(svr);
  int port = o.port;
  if (port == 0) {
    port = svr.bind_to_any_port(o.host);
    if (port < 0) return err("cannot listen on {} (any port)", o.host);
  } else if (!svr.bind_to_port(o.host, port)) {
    return err("cannot listen on {}:{} (in use, or not an address of this machine)", o.host, port);
  }
  if (!svr.set_backlog(SOMAXCONN)) return err("cannot listen on {}:{}", o.host, port);
  std::atomic<bool> failed{false};
  std::thread http([&] {
    if (!svr.listen_after_bind()) failed = true;
  });
  std::fprintf(stderr, "tq serve: listening on http://%s:%d (loading %s)\n", o.host.c_str(), port,
               o.model.c_str());
  Status loaded = service.load_model(m);
  if (!loaded.ok()) {
    svr.stop();
    http.join();
    return loaded;
  }
  service.set_runtime_name();
  std::fprintf(stderr, "tq serve: ready: model %s, context %lld, %s\n", service.info().id.c_str(),
               static_cast<long long>(service.info().ctx), service.runtime_name().c_str());

  const bool signalled = wait_for_signal(failed);
  service.drain();
  if (signalled) {
    std::fprintf(stderr, "tq serve: stopping: no new requests; draining for up to %.0f s\n",
                 o.drain_timeout_s);
    const auto until = Clock::now() + std::chrono::duration<double>(o.drain_timeout_s);
    while (!service.idle() && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  service.shutdown();
  svr.stop();
  http.join();
  if (service.has_disk_cache()) {  // SIGINT/SIGTERM: what is cached becomes durable
    auto d = service.flush_cache();
    if (!d.ok()) return d.error();
    std::fprintf(stderr, "tq serve: prompt cache flushed: %lld blocks (%s) durable in %s\n",
                 static_cast<long long>(d->blocks), format_bytes(d->bytes).c_str(),
                 o.prompt_cache_dir.c_str());
  }
  if (failed && !signalled) return err("the HTTP server stopped unexpectedly");
  std::fprintf(stderr, "tq serve: stopped (peak resident memory %s)\n",
               format_bytes(peak_resident_bytes()).c_str());
  return ok_status();
}

}  // namespace tq::serve
