// Tool calls in a model's answer, for chat templates whose models write them as
// <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen2.5, Qwen3, SmolLM3, Hermes).
// The parser takes the answer's text as it streams and splits it into plain content and whole
// tool calls; text that could be the start of a call is held back until decided. A call whose
// body is not JSON with a string "name" is given back as plain content, so nothing is lost.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tq::serve {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON text (an object), as OpenAI's function.arguments
};

// What one feed gave: content (final) and the calls completed, in the order they came.
struct ToolCallPieces {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  ToolCallPieces feed(std::string_view text);
  // The end: whatever is held back (an unfinished call) as content.
  ToolCallPieces finish();
  int calls() const { return calls_; }

 private:
  void drain(ToolCallPieces& out, bool at_end);
  std::string buf_;       // text not yet decided
  bool in_call_ = false;  // buf_ is the body of an opened call
  int calls_ = 0;
};

}  // namespace tq::serve
