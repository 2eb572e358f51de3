// libFuzzer: arbitrary bytes as a chat template, parsed and rendered for a conversation with
// tool calls under small limits; must end in a rendering or an error, never a crash or hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "text/jinja/eval.h"
#include "text/jinja/parser.h"
#include "text/jinja/value.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tq::jinja;
  static const Value messages = [] {
    auto j = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris? é ✓"},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nok",
       "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                       "arguments": {"location": "Paris", "days": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "22"}])");
    return from_json(j).value();
  }();
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto body = parse_template(text);
  if (!body.ok()) return 0;
  std::vector<std::pair<std::string, Value>> vars = {
      {"messages", messages},
      {"add_generation_prompt", Value::boolean(true)},
      {"tools", Value::none()},
      {"bos_token", Value::string("<s>")}};
  auto out = render(*body, vars, RenderLimits{size_t{1} << 20, 200000, size_t{64} << 20});
  (void)out;
  return 0;
}
