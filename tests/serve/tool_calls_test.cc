#include "serve/tool_calls.h"

#include <gtest/gtest.h>

#include <string>

namespace tq::serve {
namespace {

// Feeds `text` in pieces of `step` bytes; returns (content, calls) as the HTTP side sees them.
ToolCallPieces run(const std::string& text, size_t step) {
  ToolCallParser p;
  ToolCallPieces all;
  auto add = [&](ToolCallPieces x) {
    all.content += x.content;
    for (auto& c : x.calls) all.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < text.size(); i += step) add(p.feed(text.substr(i, step)));
  add(p.finish());
  return all;
}

TEST(ToolCalls, SplitsCallsFromContentWhateverThePieces) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}"
      "</tool_call>";
  for (size_t step : {1, 2, 3, 7, 1000}) {
    auto r = run(text, step);
    EXPECT_EQ(r.content, "Let me check.\n\n") << step;
    ASSERT_EQ(r.calls.size(), 2u) << step;
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris"})");
    EXPECT_EQ(r.calls[1].name, "f");
    EXPECT_EQ(r.calls[1].arguments, R"({"x":1})");
  }
}

TEST(ToolCalls, WhatIsNotACallStaysContent) {
  // Not JSON, no name, arguments not an object, never closed, a tag that only starts.
  for (const std::string text :
       {"<tool_call>not json</tool_call> after", "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
        "a <tool_call>{\"name\": \"f\"", "x < y and <tool_ca"}) {
    for (size_t step : {1, 5, 1000}) {
      auto r = run(text, step);
      EXPECT_EQ(r.content, text) << step;
      EXPECT_TRUE(r.calls.empty());
    }
  }
  auto r = run("<tool_call>{\"name\": \"g\"}</tool_call>", 4);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
}

TEST(ToolCalls, ContentBeforeAPossibleTagIsNotHeldLonger) {
  ToolCallParser p;
  EXPECT_EQ(p.feed("Hello <").content, "Hello ");
  EXPECT_EQ(p.feed("b>").content, "<b>");
}

}  // namespace
}  // namespace tq::serve
