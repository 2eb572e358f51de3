// The request parser: a valid request in full, defaults, and a table of bad requests that must
// each end in a 400 with the right code and param (never an exception, never a silent ignore).
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "serve/request.h"

namespace tq::serve {
namespace {

CompletionRequest ok_chat(const std::string& body) {
  auto r = parse_completion_request(body, Endpoint::kChat);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << ": " << e->message;
  return std::holds_alternative<CompletionRequest>(r) ? std::get<CompletionRequest>(r)
                                                      : CompletionRequest{};
}

TEST(ServeRequest, FullChatRequest) {
  auto r = ok_chat(R"({"model":"m","messages":[{"role":"developer","content":"Be brief."},
    {"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]}],
    "max_completion_tokens":16,"max_tokens":20,"temperature":0.5,"top_p":0.9,"top_k":-1,
    "min_p":0.1,"seed":-3,"stop":["a","b"],"presence_penalty":1,"frequency_penalty":-2,
    "logit_bias":{"5":-100,"7":2.5},"n":1,"stream":true,"stream_options":{"include_usage":true},
    "user":"me","logprobs":false,"tools":null})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0]["role"], "system");  // developer is the template's system turn
  EXPECT_EQ(r.messages[1]["content"], "Hi there");
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.adjust.bias.size(), 2u);
  EXPECT_TRUE(r.stream && r.include_usage);
}

TEST(ServeRequest, DefaultsAreOpenAIs) {
  auto r = ok_chat(R"({"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(r.sampling.temperature, 1.0);
  EXPECT_EQ(r.sampling.top_p, 1.0);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.seeded);
  EXPECT_FALSE(r.stream);
}

TEST(ServeRequest, ChoicesLogprobsAndEcho) {
  auto r = ok_chat(R"({"messages":[{"role":"user","content":"x"}],"n":3,"top_logprobs":4,
    "logprobs":true})");
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.top_logprobs, 4);  // whichever order the two fields come in
  EXPECT_EQ(ok_chat(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true})").top_logprobs,
            0);
  EXPECT_EQ(ok_chat(R"({"messages":[{"role":"user","content":"x"}]})").top_logprobs, -1);
  auto c = parse_completion_request(R"({"prompt":"x","logprobs":0,"n":2})", Endpoint::kCompletion);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(c));
  EXPECT_EQ(std::get<CompletionRequest>(c).top_logprobs, 0);
  EXPECT_EQ(std::get<CompletionRequest>(c).n, 2);
  auto e = parse_completion_request(R"({"prompt":"x","echo":true})", Endpoint::kCompletion);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(e));
  EXPECT_TRUE(std::get<CompletionRequest>(e).echo);
  EXPECT_TRUE(
      ok_chat(R"({"messages":[{"role":"user","content":"x"}],"ignore_eos":true})").ignore_eos);
}

TEST(ServeRequest, ToolsAndToolTurns) {
  auto r = ok_chat(R"({"messages":[{"role":"user","content":"Weather?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"a\": 1}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"22"}],
    "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"z":{},"a":{}}}}}],"tool_choice":"auto","parallel_tool_calls":true})");
  ASSERT_EQ(r.messages.size(), 3u);
  // The arguments reach the template as an object, keys in the client's order.
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"].dump(),
            R"({"city":"Paris","a":1})");
  EXPECT_EQ(r.messages[1]["content"], "");
  EXPECT_EQ(r.messages[2]["tool_call_id"], "c1");
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"].dump(), R"({"z":{},"a":{}})");
  EXPECT_FALSE(r.tool_choice_none);
  EXPECT_TRUE(ok_chat(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"none"})")
                  .tool_choice_none);
}

TEST(ServeRequest, CompletionPrompts) {
  auto text =
      parse_completion_request(R"({"prompt":"abc","max_tokens":3.0})", Endpoint::kCompletion);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(text));
  EXPECT_EQ(std::get<CompletionRequest>(text).prompt_text, "abc");
  EXPECT_EQ(std::get<CompletionRequest>(text).max_tokens, 3);
  auto ids = parse_completion_request(R"({"prompt":[[1,2,3]]})", Endpoint::kCompletion);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(ids));
  EXPECT_TRUE(std::get<CompletionRequest>(ids).prompt_is_ids);
  EXPECT_EQ(std::get<CompletionRequest>(ids).prompt_ids, (std::vector<int32_t>{1, 2, 3}));
}

struct Bad {
  Endpoint ep;
  std::string body;
  const char* code;
  const char* param;  // "" when none
};

const std::string kMsg = R"("messages":[{"role":"user","content":"x"}])";

TEST(ServeRequest, BadRequestsAreTyped400s) {
  const std::vector<Bad> table = {
      {Endpoint::kChat, "", "invalid_json", ""},
      {Endpoint::kChat, "{", "invalid_json", ""},
      {Endpoint::kChat, "[1]", "invalid_json", ""},
      {Endpoint::kChat, R"({"messages": NaN})", "invalid_json", ""},
      {Endpoint::kChat, "{\"messages\":\"\xff\"}", "invalid_json", ""},
      {Endpoint::kChat, R"({"messages":"\ud800"})", "invalid_json", ""},
      {Endpoint::kChat, R"({})", "missing_required_parameter", "messages"},
      {Endpoint::kChat, R"({"messages":null})", "missing_required_parameter", "messages"},
      {Endpoint::kChat, R"({"messages":[]})", "invalid_value", "messages"},
      {Endpoint::kChat, R"({"messages":{}})", "invalid_type", "messages"},
      {Endpoint::kChat, R"({"messages":[1]})", "invalid_type", "messages[0]"},
      {Endpoint::kChat, R"({"messages":[{"content":"x"}]})", "missing_required_parameter",
       "messages[0].role"},
      {Endpoint::kChat, R"({"messages":[{"role":"robot","content":"x"}]})", "invalid_value",
       "messages[0].role"},
      {Endpoint::kChat, R"({"messages":[{"role":"user"}]})", "missing_required_parameter",
       "messages[0].content"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":5}]})", "invalid_type",
       "messages[0].content"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "unsupported_parameter", "messages[0].content[0].type"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x","foo":1}]})",
       "unknown_parameter", "messages[0].foo"},
      {Endpoint::kChat, R"({"messages":[{"role":"function","content":"x"}]})",
       "unsupported_parameter", "messages[0].role"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})",
       "invalid_value", "messages[0].tool_calls"},
      {Endpoint::kChat, R"({"messages":[{"role":"assistant","tool_calls":[{"function":{}}]}]})",
       "missing_required_parameter", "messages[0].tool_calls[0].function.name"},
      {Endpoint::kChat, "{" + kMsg + R"(,"max_tokens":0})", "invalid_value", "max_tokens"},
      {Endpoint::kChat, "{" + kMsg + R"(,"max_tokens":-5})", "invalid_value", "max_tokens"},
      {Endpoint::kChat, "{" + kMsg + R"(,"max_tokens":1e300})", "invalid_value", "max_tokens"},
      {Endpoint::kChat, "{" + kMsg + R"(,"max_tokens":99999999999})", "invalid_value",
       "max_tokens"},
      {Endpoint::kChat, "{" + kMsg + R"(,"max_tokens":"10"})", "invalid_type", "max_tokens"},
      {Endpoint::kChat, "{" + kMsg + R"(,"max_tokens":2.5})", "invalid_type", "max_tokens"},
      {Endpoint::kChat, "{" + kMsg + R"(,"max_completion_tokens":0})", "invalid_value",
       "max_completion_tokens"},
      {Endpoint::kChat, "{" + kMsg + R"(,"temperature":-0.1})", "invalid_value", "temperature"},
      {Endpoint::kChat, "{" + kMsg + R"(,"temperature":2.5})", "invalid_value", "temperature"},
      {Endpoint::kChat, "{" + kMsg + R"(,"temperature":"hot"})", "invalid_type", "temperature"},
      {Endpoint::kChat, "{" + kMsg + R"(,"top_p":0})", "invalid_value", "top_p"},
      {Endpoint::kChat, "{" + kMsg + R"(,"top_p":1.5})", "invalid_value", "top_p"},
      {Endpoint::kChat, "{" + kMsg + R"(,"top_k":-2})", "invalid_value", "top_k"},
      {Endpoint::kChat, "{" + kMsg + R"(,"min_p":2})", "invalid_value", "min_p"},
      {Endpoint::kChat, "{" + kMsg + R"(,"seed":"x"})", "invalid_type", "seed"},
      {Endpoint::kChat, "{" + kMsg + R"(,"seed":1.5})", "invalid_type", "seed"},
      {Endpoint::kChat, "{" + kMsg + R"(,"stop":["a","b","c","d","e"]})", "invalid_value", "stop"},
      {Endpoint::kChat, "{" + kMsg + R"(,"stop":[""]})", "invalid_value", "stop[0]"},
      {Endpoint::kChat, "{" + kMsg + R"(,"stop":["a",3]})", "invalid_type", "stop[1]"},
      {Endpoint::kChat, "{" + kMsg + R"(,"stop":7})", "invalid_type", "stop"},
      {Endpoint::kChat, "{" + kMsg + R"(,"presence_penalty":3})", "invalid_value",
       "presence_penalty"},
      {Endpoint::kChat, "{" + kMsg + R"(,"frequency_penalty":-2.5})", "invalid_value",
       "frequency_penalty"},
      {Endpoint::kChat, "{" + kMsg + R"(,"logit_bias":{"abc":1}})", "invalid_value", "logit_bias"},
      {Endpoint::kChat, "{" + kMsg + R"(,"logit_bias":{"5":101}})", "invalid_value",
       "logit_bias.5"},
      {Endpoint::kChat, "{" + kMsg + R"(,"logit_bias":[1]})", "invalid_type", "logit_bias"},
      {Endpoint::kChat, "{" + kMsg + R"(,"n":100})", "invalid_value", "n"},
      {Endpoint::kChat, "{" + kMsg + R"(,"n":9})", "invalid_value", "n"},
      {Endpoint::kChat, "{" + kMsg + R"(,"n":0})", "invalid_value", "n"},
      {Endpoint::kChat, "{" + kMsg + R"(,"stream":"yes"})", "invalid_type", "stream"},
      {Endpoint::kChat, "{" + kMsg + R"(,"stream_options":{"include_usage":true}})",
       "invalid_value", "stream_options"},
      {Endpoint::kChat, "{" + kMsg + R"(,"stream":true,"stream_options":{"x":1}})",
       "unknown_parameter", "stream_options.x"},
      {Endpoint::kChat, "{" + kMsg + R"(,"logprobs":1})", "invalid_type", "logprobs"},
      {Endpoint::kChat, "{" + kMsg + R"(,"top_logprobs":3})", "invalid_value", "top_logprobs"},
      {Endpoint::kChat, "{" + kMsg + R"(,"logprobs":true,"top_logprobs":21})", "invalid_value",
       "top_logprobs"},
      {Endpoint::kChat, "{" + kMsg + R"(,"tools":{}})", "invalid_type", "tools"},
      {Endpoint::kChat, "{" + kMsg + R"(,"tool_choice":{"type":"function"}})",
       "unsupported_parameter", "tool_choice"},
      {Endpoint::kChat, "{" + kMsg + R"(,"response_format":{"type":"json_object"}})",
       "unsupported_parameter", "response_format"},
      {Endpoint::kChat, "{" + kMsg + R"(,"bogus":1})", "unknown_parameter", "bogus"},
      {Endpoint::kChat, "{" + kMsg + R"(,"model":5})", "invalid_type", "model"},
      {Endpoint::kChat, "{" + kMsg + R"(,"user":5})", "invalid_type", "user"},
      {Endpoint::kChat, "{" + kMsg + R"(,"prompt":"x"})", "unknown_parameter", "prompt"},
      {Endpoint::kCompletion, R"({"messages":[]})", "unknown_parameter", "messages"},
      {Endpoint::kCompletion, R"({"max_tokens":3})", "missing_required_parameter", "prompt"},
      {Endpoint::kCompletion, R"({"prompt":[]})", "invalid_value", "prompt"},
      {Endpoint::kCompletion, R"({"prompt":["a","b"]})", "unsupported_parameter", "prompt"},
      {Endpoint::kCompletion, R"({"prompt":[1,-2]})", "invalid_value", "prompt[1]"},
      {Endpoint::kCompletion, R"({"prompt":[1,"a"]})", "invalid_type", "prompt[1]"},
      {Endpoint::kCompletion, R"({"prompt":5})", "invalid_type", "prompt"},
      {Endpoint::kCompletion, R"({"prompt":"x","echo":true,"logprobs":2})", "unsupported_parameter",
       "echo"},
      {Endpoint::kCompletion, R"({"prompt":"x","logprobs":21})", "invalid_value", "logprobs"},
      {Endpoint::kCompletion, R"({"prompt":"x","best_of":3})", "unsupported_parameter", "best_of"},
      {Endpoint::kCompletion, R"({"prompt":"x","suffix":"y"})", "unsupported_parameter", "suffix"},
  };
  for (const auto& b : table) {
    SCOPED_TRACE(b.body);
    auto r = parse_completion_request(b.body, b.ep);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r));
    const ApiError& e = std::get<ApiError>(r);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.code, b.code) << e.message;
    EXPECT_EQ(e.param.value_or(""), b.param) << e.message;
    EXPECT_FALSE(e.message.empty());
    const auto j = error_body(e);
    EXPECT_TRUE(j["error"].contains("message") && j["error"].contains("type") &&
                j["error"].contains("param") && j["error"].contains("code"));
  }
}

TEST(ServeRequest, TokenizeBodies) {
  auto t = parse_tokenize_request(R"({"content":"hi","add_special":true})");
  ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(t));
  EXPECT_TRUE(std::get<TokenizeRequest>(t).add_special);
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_tokenize_request(R"({"text":"hi"})")));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_tokenize_request(R"({})")));
  auto d = parse_detokenize_request(R"({"tokens":[1,2]})");
  ASSERT_TRUE(std::holds_alternative<std::vector<int32_t>>(d));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_detokenize_request(R"({"tokens":[-1]})")));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_detokenize_request(R"({"tokens":"1"})")));
}

}  // namespace
}  // namespace tq::serve
