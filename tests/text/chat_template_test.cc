// The chat-template interpreter on small templates of our own; the real templates are checked
// against jinja2 by tests/oracle/test_chat_template.py.
#include <gtest/gtest.h>

#include <chrono>

#include <nlohmann/json.hpp>

#include "text/chat_template.h"
#include "text/jinja/eval.h"
#include "text/jinja/parser.h"
#include "text/jinja/value.h"

namespace tq {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string render(std::string_view tmpl, const json& messages = json::array(),
                   const json& vars = json::object(), bool gen = true) {
  auto r = apply_chat_template(tmpl, messages, gen, vars);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : "";
}

std::string error_of(std::string_view tmpl, const json& messages = json::array()) {
  auto r = apply_chat_template(tmpl, messages, true, json::object());
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.error().message;
}

const json kChat = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                {{"role", "user"}, {"content", "Hi"}},
                                {{"role", "assistant"}, {"content", "Hello!"}},
                                {{"role", "user"}, {"content", "Bye"}}});

// A ChatML template with a default system prompt, written the way SmolLM2's is.
constexpr std::string_view kChatMl =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nDefault<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}\n";

TEST(ChatTemplate, ChatMlWithAndWithoutSystem) {
  EXPECT_EQ(render(kChatMl, json::array({kChat[1]})),
            "<|im_start|>system\nDefault<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render(kChatMl, kChat, json::object(), false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
}

TEST(ChatTemplate, WhitespaceControlAsTransformers) {
  // trim_blocks eats the newline after %}, lstrip_blocks the indentation before {%,
  // '-' strips all whitespace on its side, and one trailing newline of the source goes.
  EXPECT_EQ(render("  {% if true %}\n    x\n  {% endif %}\n  y\n"), "    x\n  y");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e"), "abc d e");
  EXPECT_EQ(render("  {%+ if true %}k{% endif %}"), "  k");
  EXPECT_EQ(render("{# note #}\n  {{ 'v' }}"), "  v");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("a\r\nb\r\n"), "a\nb");
}

TEST(ChatTemplate, ScopingFollowsJinja) {
  // A for-loop iteration is a scope of its own; if-blocks are not; namespaces carry out.
  EXPECT_EQ(
      render("{% set x = 0 %}{% for i in [1,2] %}[{{ x }}]{% set x = i %}{% endfor %}[{{ x }}]"),
      "[0][0][0]");
  EXPECT_EQ(render("{% set x = 0 %}{% if true %}{% set x = 5 %}{% endif %}{{ x }}"), "5");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                   "{% endfor %}{{ ns.n }}",
                   kChat),
            "4");
}

TEST(ChatTemplate, LoopVariablesSlicingAndFilters) {
  EXPECT_EQ(render("{% for m in messages[::-1] %}{{ loop.index0 }}{{ m.role[0] }}"
                   "{{ '|' if not loop.last }}{% endfor %}",
                   kChat),
            "0u|1a|2u|3s");
  EXPECT_EQ(
      render("{% for x in [1,2,3,4] if x is even %}{{ loop.index }}/{{ loop.length }}:{{ x }} "
             "{% endfor %}"),
      "1/2:2 2/2:4 ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(
      render("{{ messages|length }} {{ '  a b '|trim }} {{ none|string }} {{ x|default('d') }}",
             kChat),
      "4 a b None d");
  EXPECT_EQ(render("{{ 'a</think>\n\nb'.split('</think>')[-1].lstrip('\n') }}"), "b");
  EXPECT_EQ(render("{{ '<tool_response>x</tool_response>'.startswith('<tool_response>') }}"),
            "True");
}

TEST(ChatTemplate, PythonValueFormatting) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5, {'k': (1,)}] }}"),
            "[1, 'a', None, True, 1.5, {'k': (1,)}]");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"),
            "3.5 3 -4 2 1024");
  EXPECT_EQ(jinja::py_float_repr(1e16), "1e+16");
  EXPECT_EQ(jinja::py_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(jinja::py_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(jinja::py_float_repr(1e-5), "1e-05");
  EXPECT_EQ(jinja::py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(jinja::py_float_repr(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(render("{{ 'é' ~ \"it's\"|length }}"), "é4");
}

// Found by chat_template_fuzz: an empty string or list repeated 9**9 times looped 9**9 times.
TEST(ChatTemplate, EmptyRepetitionIsImmediate) {
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(render("[{{ 2 * '' * 3 ** 2 ** 9 }}]{{ ([] * 1000000000000)|length }}"
                   "{{ (() * 1000000000000)|length }}"),
            "[]00");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(ChatTemplate, ToJsonKeepsKeyOrderLikePython) {
  auto t = ChatTemplate::parse("{{ tools[0]|tojson }}|{{ tools[0]|tojson(indent=2) }}");
  ASSERT_TRUE(t.ok());
  ordered_json vars = {
      {"tools", ordered_json::array({ordered_json{{"z", 1}, {"a", {1.5, "é\n"}}}})}};
  auto r = t->render(ordered_json::array(), true, vars);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r,
            "{\"z\": 1, \"a\": [1.5, \"é\\n\"]}|{\n  \"z\": 1,\n  \"a\": [\n    1.5,\n    "
            "\"é\\n\"\n  ]\n}");
}

TEST(ChatTemplate, VariablesDefaults) {
  // tools and documents are defined (None) as in transformers; extra variables override.
  EXPECT_EQ(render("{{ tools is defined }}{{ tools is none }}{{ bos_token }}", json::array(),
                   json{{"bos_token", "<s>"}}),
            "TrueTrue<s>");
  EXPECT_EQ(render("{% if enable_thinking is defined and enable_thinking is false %}off{% endif %}",
                   json::array(), json{{"enable_thinking", false}}),
            "off");
  EXPECT_EQ(render("{{ add_generation_prompt }}", json::array(), json::object(), false), "False");
}

TEST(ChatTemplate, MacrosAndSetBlocks) {
  EXPECT_EQ(
      render("{% macro m(a, b='q') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}"),
      "<1q><23>");
  EXPECT_EQ(render("{% set s | trim %}  hi  {% endset %}[{{ s }}]"), "[hi]");
}

TEST(ChatTemplate, ErrorsNameThePlace) {
  EXPECT_EQ(error_of("ok\n  {% if %}"),
            "chat template line 2 col 9: expected an expression, got end of statement block '%}'");
  EXPECT_EQ(error_of("{% include 'x' %}"), "chat template line 1 col 4: unsupported tag 'include'");
  EXPECT_EQ(error_of("{{ 1|xmlattr }}"),
            "chat template line 1 col 6: unsupported filter 'xmlattr'");
  EXPECT_EQ(error_of("{{ raise_exception('Only user and assistant roles') }}"),
            "chat template line 1 col 19: raise_exception: Only user and assistant roles");
  EXPECT_EQ(error_of("{{ x.y }}"), "chat template line 1 col 5: 'x' is undefined");
  EXPECT_EQ(error_of("{% for x in y %}"),
            "chat template line 1 col 17: unexpected end of template: the 'for' block needs "
            "'endfor' or 'else'");
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand type(s) for +: 'str' and 'int'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
}

TEST(ChatTemplate, HostileTemplatesStopCleanly) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(error_of(deep).find("nested deeper than"), std::string::npos);
  std::string nots = "{{ " + [] {
    std::string s;
    for (int i = 0; i < 5000; ++i) s += "not ";
    return s;
  }() + "1 }}";
  EXPECT_NE(error_of(nots).find("nested deeper than"), std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("macro calls nested"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(200000)|length }}").find("Range too big"), std::string::npos);
  EXPECT_NE(error_of("{{ 'ab' * 100000000 }}").find("larger than"), std::string::npos);
  // Step and output limits, with small limits so the test is fast.
  auto body = jinja::parse_template(
      "{% for i in range(1000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}");
  ASSERT_TRUE(body.ok());
  auto r = jinja::render(*body, {}, jinja::RenderLimits{size_t{1} << 30, 10000});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("more than 10000 steps"), std::string::npos);
  r = jinja::render(*body, {}, jinja::RenderLimits{5000, 100000000});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("output larger than 5000 bytes"), std::string::npos);
  for (std::string_view bad :
       {"{{", "{%", "{#", "{{ 'x", "{{ \"\\x4\" }}", "{{ 0x }}", "{% for %}", "{{ a[ }}",
        "{{ (1, }}", "{{ {1: }}", "{{ a | }}", "{% set %}", "{% macro m( %}", "{{ a.. }}",
        "{{ 1 is }}", "}}{{ ]", "{{ [1][0:1:,2] }}"}) {
    auto p = apply_chat_template(bad, json::array(), true, json::object());
    EXPECT_FALSE(p.ok()) << bad;
  }
}

// A template comes with the checkpoint: under the default limits a huge loop, runaway recursion
// and string growth (doubling, or copying one large string every iteration, which the step
// limit alone let run for hours) each end in a clear error within seconds.
TEST(ChatTemplate, DefaultLimitsStopHostileTemplatesQuickly) {
  std::string ten_sets;
  for (int i = 0; i < 10; ++i) ten_sets += "{% set x = i %}";
  const std::pair<std::string, std::string_view> cases[] = {
      {"{% for i in range(100000) %}" + ten_sets + "{% endfor %}",
       "template ran more than 1000000 steps"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "template ran more than 1000000 steps"},
      {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
       "macro calls nested deeper than 64"},
      {"{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
       "{% endfor %}",
       "string larger than 67108864 bytes"},
      {"{{ 'x' * 40000000 ~ 'x' * 40000000 }}", "string larger than 67108864 bytes"},
      {"{% set s = 'x' * 60000000 %}{% for i in range(100000) %}{% set t = s ~ 'y' %}"
       "{% endfor %}",
       "template made more than 1073741824 bytes of values (work limit)"},
      {"{% set s = 'x' * 60000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}"
       "{% endfor %}",
       "(work limit)"},
      {"{% set l = [['x' * 10000000]] %}{% for i in range(100000) %}{% if l == l %}{% endif %}"
       "{% endfor %}",
       "(work limit)"},
      {"{% for i in range(100000) %}{% set x %}" + std::string(100000, 'z') +
           "{% endset %}{% endfor %}",
       "line 1 col 40: template made more than"},
      {"{% set s = 'x' * 1000000 %}{{ ([s] * 1000)|length }}",
       "repetition result larger than 67108864 bytes"},
      {"{{ ('a\\n' * 100000)|indent('x' * 100000) }}", "string too large"},
      {"{% set ns = namespace() %}{% set ns.a = ns %}{% set ns.b = ns %}{{ [ns]|length }}",
       "(work limit)"},
  };
  for (const auto& [tmpl, want] : cases) {
    auto t0 = std::chrono::steady_clock::now();
    std::string e = error_of(tmpl);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(e.find(want), std::string::npos) << tmpl.substr(0, 120) << " -> " << e;
    EXPECT_LT(secs, 5.0) << tmpl.substr(0, 120);
  }
}

TEST(ChatTemplate, TemplateFromTokenizerConfig) {
  EXPECT_EQ(chat_template_from_config(json{{"chat_template", "T"}}), "T");
  json named = {{"chat_template", json::array({{{"name", "tool_use"}, {"template", "A"}},
                                               {{"name", "default"}, {"template", "B"}}})}};
  EXPECT_EQ(chat_template_from_config(named), "B");
  EXPECT_EQ(chat_template_from_config(named, "tool_use"), "A");
  EXPECT_FALSE(chat_template_from_config(json{{"bos_token", "x"}}).has_value());
  auto sp =
      chat_template_special_tokens(json{{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                                        {"eos_token", "</s>"},
                                        {"pad_token", nullptr}});
  EXPECT_EQ(sp.dump(), R"({"bos_token":"<s>","eos_token":"</s>"})");
}

}  // namespace
}  // namespace tq
