#include "serve/tool_calls.h"

#include <nlohmann/json.hpp>

namespace tq::serve {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

// The longest suffix of `s` that is a proper prefix of `tag` (it may become the tag).
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

// {"name": string, "arguments": object (or a JSON text of one)} -> a call.
bool parse_call(std::string_view body, ToolCall& call) {
  auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return false;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_object()) {
    call.arguments = args->dump();
  } else if (args->is_string()) {
    auto inner = nlohmann::ordered_json::parse(args->get_ref<const std::string&>(), nullptr, false);
    if (inner.is_discarded() || !inner.is_object()) return false;
    call.arguments = inner.dump();
  } else {
    return false;
  }
  return true;
}

}  // namespace

void ToolCallParser::drain(ToolCallPieces& out, bool at_end) {
  for (;;) {
    if (!in_call_) {
      const size_t open = buf_.find(kOpen);
      if (open == std::string::npos) {
        const size_t keep = at_end ? 0 : partial_tag(buf_, kOpen);
        out.content += buf_.substr(0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      out.content += buf_.substr(0, open);
      buf_.erase(0, open + kOpen.size());
      in_call_ = true;
    }
    const size_t close = buf_.find(kClose);
    if (close == std::string::npos) {
      if (at_end) {  // never closed: what the model wrote, as content
        out.content += std::string(kOpen) + buf_;
        buf_.clear();
        in_call_ = false;
      }
      return;
    }
    ToolCall call;
    if (parse_call(buf_.substr(0, close), call)) {
      out.calls.push_back(std::move(call));
      ++calls_;
    } else {
      out.content += std::string(kOpen) + buf_.substr(0, close + kClose.size());
    }
    buf_.erase(0, close + kClose.size());
    in_call_ = false;
  }
}

ToolCallPieces ToolCallParser::feed(std::string_view text) {
  buf_ += text;
  ToolCallPieces out;
  drain(out, false);
  return out;
}

ToolCallPieces ToolCallParser::finish() {
  ToolCallPieces out;
  drain(out, true);
  return out;
}

}  // namespace tq::serve
