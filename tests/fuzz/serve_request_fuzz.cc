// libFuzzer: arbitrary bytes as the body of a chat or completions request (the first byte picks
// which); parsing must end in a request or a typed 4xx error, never a crash or hang. The same
// bytes as a model's answer through the tool-call parser, fed in pieces (the first byte's other
// bits pick their size): what it finds no call in comes back whole as content.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "serve/request.h"
#include "serve/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq::serve;
  if (size == 0) return 0;
  const Endpoint ep = (data[0] & 1) ? Endpoint::kCompletion : Endpoint::kChat;
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = parse_completion_request(body, ep);
  if (auto* e = std::get_if<ApiError>(&r)) {
    if (e->status < 400 || e->status > 499 || e->message.empty()) __builtin_trap();
    (void)error_body(*e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    const auto& req = std::get<CompletionRequest>(r);
    if (req.stop.size() > static_cast<size_t>(kMaxStops)) __builtin_trap();
    if (req.max_tokens && (*req.max_tokens < 1 || *req.max_tokens > kMaxTokensLimit))
      __builtin_trap();
  }
  ToolCallParser tools;
  std::string content;
  const size_t step = 1 + (data[0] >> 1);
  for (size_t i = 0; i < body.size(); i += step)
    content += tools.feed(body.substr(i, step)).content;
  content += tools.finish().content;
  if (tools.calls() == 0 && content != body) __builtin_trap();
  (void)parse_tokenize_request(body);
  (void)parse_detokenize_request(body);
  return 0;
}
