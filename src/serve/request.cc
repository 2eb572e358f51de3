#include "serve/request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace tq::serve {
namespace {

// Ordered: tool schemas keep the client's key order (a template's tojson prints them so).
using json = nlohmann::ordered_json;
using Fail = std::optional<ApiError>;

ApiError wrong_type(const std::string& param, std::string_view want, const json& v) {
  return bad_request(param, "invalid_type",
                     fmt::format("'{}' must be {}, got {}", param, want, v.type_name()));
}

ApiError bad_value(const std::string& param, std::string message) {
  return bad_request(param, "invalid_value", fmt::format("'{}' {}", param, message));
}

ApiError unsupported(const std::string& param, std::string_view why) {
  return bad_request(param, "unsupported_parameter",
                     fmt::format("'{}' is not supported by this server{}", param, why));
}

// An integer, or a float with an integral value (JSON writers print 10 as 10.0 at times).
Fail get_int(const std::string& param, const json& v, int64_t lo, int64_t hi, int64_t& out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
      return bad_value(param, fmt::format("must be at most {}", hi));
    out = v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return wrong_type(param, "an integer", v);
    if (d < -9.2e18 || d > 9.2e18) return bad_value(param, fmt::format("must be at most {}", hi));
    out = static_cast<int64_t>(d);
  } else {
    return wrong_type(param, "an integer", v);
  }
  if (out < lo || out > hi) return bad_value(param, fmt::format("must be in [{}, {}]", lo, hi));
  return std::nullopt;
}

Fail get_number(const std::string& param, const json& v, double lo, double hi, bool lo_open,
                double& out) {
  if (!v.is_number()) return wrong_type(param, "a number", v);
  out = v.get<double>();
  if (!std::isfinite(out) || out < lo || out > hi || (lo_open && out == lo))
    return bad_value(param, fmt::format("must be in {}{}, {}]", lo_open ? "(" : "[", lo, hi));
  return std::nullopt;
}

Fail get_bool(const std::string& param, const json& v, bool& out) {
  if (!v.is_boolean()) return wrong_type(param, "a boolean", v);
  out = v.get<bool>();
  return std::nullopt;
}

Fail get_string(const std::string& param, const json& v, std::string& out) {
  if (!v.is_string()) return wrong_type(param, "a string", v);
  out = v.get<std::string>();
  return std::nullopt;
}

Fail parse_stop(const json& v, std::vector<std::string>& out) {
  auto one = [&](const std::string& param, const json& s) -> Fail {
    if (!s.is_string()) return wrong_type(param, "a string", s);
    const auto& str = s.get_ref<const std::string&>();
    if (str.empty()) return bad_value(param, "must not be empty");
    if (str.size() > kMaxStopBytes)
      return bad_value(param, fmt::format("is longer than {} bytes", kMaxStopBytes));
    out.push_back(str);
    return std::nullopt;
  };
  if (v.is_string()) return one("stop", v);
  if (!v.is_array()) return wrong_type("stop", "a string or an array of strings", v);
  if (v.size() > static_cast<size_t>(kMaxStops))
    return bad_value("stop", fmt::format("has {} strings; at most {}", v.size(), kMaxStops));
  for (size_t i = 0; i < v.size(); ++i)
    if (auto f = one(fmt::format("stop[{}]", i), v[i])) return f;
  return std::nullopt;
}

Fail parse_logit_bias(const json& v, LogitAdjust& a) {
  if (!v.is_object()) return wrong_type("logit_bias", "an object", v);
  if (v.size() > 1024) return bad_value("logit_bias", "has more than 1024 entries");
  for (const auto& [key, val] : v.items()) {
    const std::string param = fmt::format("logit_bias.{}", key);
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t id = digits ? std::stoll(key) : -1;
    if (!digits || id > std::numeric_limits<int32_t>::max())
      return bad_request("logit_bias", "invalid_value",
                         fmt::format("'logit_bias' keys must be token ids, got '{}'", key));
    double b = 0;
    if (auto f = get_number(param, val, -100, 100, false, b)) return f;
    a.bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  return std::nullopt;
}

// Message content: a string, or text parts joined (anything but text is not supported).
Fail parse_content(const std::string& param, const json& v, std::string& out) {
  if (v.is_string()) {
    out = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return wrong_type(param, "a string or an array of content parts", v);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", param, i);
    const json& part = v[i];
    if (!part.is_object()) return wrong_type(p, "an object", part);
    auto type = part.find("type");
    if (type == part.end())
      return bad_request(p + ".type", "missing_required_parameter",
                         fmt::format("'{}.type' is required", p));
    if (!type->is_string()) return wrong_type(p + ".type", "a string", *type);
    if (*type != "text")
      return unsupported(p + ".type",
                         fmt::format(" (content part '{}'; only text)", type->get<std::string>()));
    for (const auto& [k, _] : part.items())
      if (k != "type" && k != "text")
        return bad_request(p + "." + k, "unknown_parameter",
                           fmt::format("unknown field '{}.{}'", p, k));
    auto text = part.find("text");
    if (text == part.end())
      return bad_request(p + ".text", "missing_required_parameter",
                         fmt::format("'{}.text' is required", p));
    std::string t;
    if (auto f = get_string(p + ".text", *text, t)) return f;
    out += t;
  }
  return std::nullopt;
}

// An assistant turn's tool_calls: [{id, type: "function", function: {name, arguments}}]; the
// arguments (a JSON text) are handed to the template as an object when they parse as one, as
// transformers' templates expect.
Fail parse_tool_calls(const std::string& p, const json& v, json& out) {
  if (!v.is_array()) return wrong_type(p, "an array", v);
  out = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string c = fmt::format("{}[{}]", p, i);
    if (!v[i].is_object()) return wrong_type(c, "an object", v[i]);
    std::string id, type = "function", name;
    json args = json::object();
    bool has_fn = false;
    for (const auto& [k, val] : v[i].items()) {
      if (k == "id") {
        if (auto f = get_string(c + ".id", val, id)) return f;
      } else if (k == "type") {
        if (auto f = get_string(c + ".type", val, type)) return f;
        if (type != "function") return bad_value(c + ".type", "must be 'function'");
      } else if (k == "function") {
        if (!val.is_object()) return wrong_type(c + ".function", "an object", val);
        has_fn = true;
        for (const auto& [fk, fv] : val.items()) {
          const std::string fp = c + ".function." + fk;
          if (fk == "name") {
            if (auto f = get_string(fp, fv, name)) return f;
          } else if (fk == "arguments") {
            std::string a;
            if (auto f = get_string(fp, fv, a)) return f;
            json parsed = json::parse(a, nullptr, /*allow_exceptions=*/false);
            args = parsed.is_object() ? parsed : json(a);
          } else {
            return bad_request(fp, "unknown_parameter", fmt::format("unknown field '{}'", fp));
          }
        }
      } else {
        return bad_request(c + "." + k, "unknown_parameter",
                           fmt::format("unknown field '{}.{}'", c, k));
      }
    }
    if (!has_fn || name.empty())
      return bad_request(c + ".function.name", "missing_required_parameter",
                         fmt::format("'{}.function.name' is required", c));
    json call = {{"type", type}, {"function", {{"name", name}, {"arguments", args}}}};
    if (!id.empty()) call["id"] = id;
    out.push_back(std::move(call));
  }
  return std::nullopt;
}

Fail parse_messages(const json& v, nlohmann::ordered_json& out) {
  if (!v.is_array()) return wrong_type("messages", "an array", v);
  if (v.empty()) return bad_value("messages", "must hold at least one message");
  out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = fmt::format("messages[{}]", i);
    const json& m = v[i];
    if (!m.is_object()) return wrong_type(p, "an object", m);
    std::string role, content, name, tool_call_id;
    bool has_content = false, has_name = false, has_tool_call_id = false;
    json tool_calls;
    for (const auto& [k, val] : m.items()) {
      const std::string kp = p + "." + k;
      if (k == "role") {
        if (auto f = get_string(kp, val, role)) return f;
      } else if (k == "content") {
        if (val.is_null()) continue;
        if (auto f = parse_content(kp, val, content)) return f;
        has_content = true;
      } else if (k == "name") {
        if (auto f = get_string(kp, val, name)) return f;
        has_name = true;
      } else if (k == "tool_calls") {
        if (val.is_null()) continue;
        if (auto f = parse_tool_calls(kp, val, tool_calls)) return f;
      } else if (k == "tool_call_id") {
        if (auto f = get_string(kp, val, tool_call_id)) return f;
        has_tool_call_id = true;
      } else if (k == "function_call" || k == "refusal" || k == "audio") {
        if (!val.is_null()) return unsupported(kp, "");
      } else {
        return bad_request(kp, "unknown_parameter", fmt::format("unknown field '{}'", kp));
      }
    }
    if (role.empty() && !m.contains("role"))
      return bad_request(p + ".role", "missing_required_parameter",
                         fmt::format("'{}.role' is required", p));
    if (role == "function") return unsupported(p + ".role", " (use 'tool')");
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool")
      return bad_value(
          p + ".role",
          fmt::format("must be system, developer, user, assistant or tool, got '{}'", role));
    if (!tool_calls.is_null() && role != "assistant")
      return bad_value(p + ".tool_calls", "is only allowed on assistant messages");
    if (has_tool_call_id && role != "tool")
      return bad_value(p + ".tool_call_id", "is only allowed on tool messages");
    // An assistant turn that only calls tools may have no content.
    if (!has_content && tool_calls.is_null())
      return bad_request(p + ".content", "missing_required_parameter",
                         fmt::format("'{}.content' is required", p));
    // Chat templates know system, not developer (OpenAI's newer name for the same turn).
    nlohmann::ordered_json msg = {{"role", role == "developer" ? "system" : role},
                                  {"content", content}};
    if (has_name) msg["name"] = name;
    if (!tool_calls.is_null()) msg["tool_calls"] = std::move(tool_calls);
    if (has_tool_call_id) msg["tool_call_id"] = tool_call_id;
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

// tools: [{type: "function", function: {name, description?, parameters?, strict?}}], handed
// to the chat template as given.
Fail parse_tools(const json& v, json& out) {
  if (!v.is_array()) return wrong_type("tools", "an array", v);
  if (v.size() > 128) return bad_value("tools", "has more than 128 tools");
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = fmt::format("tools[{}]", i);
    const json& t = v[i];
    if (!t.is_object()) return wrong_type(p, "an object", t);
    for (const auto& [k, val] : t.items())
      if (k != "type" && k != "function")
        return bad_request(p + "." + k, "unknown_parameter",
                           fmt::format("unknown field '{}.{}'", p, k));
    auto type = t.find("type");
    if (type == t.end() || !type->is_string() || *type != "function")
      return bad_value(p + ".type", "must be 'function'");
    auto fn = t.find("function");
    if (fn == t.end())
      return bad_request(p + ".function", "missing_required_parameter",
                         fmt::format("'{}.function' is required", p));
    if (!fn->is_object()) return wrong_type(p + ".function", "an object", *fn);
    for (const auto& [k, val] : fn->items()) {
      const std::string fp = p + ".function." + k;
      if (k == "name") {
        if (!val.is_string() || val.get_ref<const std::string&>().empty())
          return bad_value(fp, "must be a non-empty string");
      } else if (k == "description") {
        if (!val.is_string()) return wrong_type(fp, "a string", val);
      } else if (k == "parameters") {
        if (!val.is_object()) return wrong_type(fp, "an object (a JSON schema)", val);
      } else if (k == "strict") {
        if (!val.is_boolean()) return wrong_type(fp, "a boolean", val);
      } else {
        return bad_request(fp, "unknown_parameter", fmt::format("unknown field '{}'", fp));
      }
    }
    if (!fn->contains("name"))
      return bad_request(p + ".function.name", "missing_required_parameter",
                         fmt::format("'{}.function.name' is required", p));
  }
  out = v;
  return std::nullopt;
}

Fail parse_prompt(const json& v, CompletionRequest& r) {
  if (v.is_string()) {
    r.prompt_text = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return wrong_type("prompt", "a string or an array of token ids", v);
  if (v.empty()) return bad_value("prompt", "must not be empty");
  if (v.size() == 1 && v[0].is_string()) return parse_prompt(v[0], r);
  if (v.size() == 1 && v[0].is_array()) return parse_prompt(v[0], r);
  if (v[0].is_string() || v[0].is_array())
    return unsupported("prompt", " (several prompts in one request)");
  r.prompt_is_ids = true;
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t id = 0;
    if (auto f =
            get_int(fmt::format("prompt[{}]", i), v[i], 0, std::numeric_limits<int32_t>::max(), id))
      return f;
    r.prompt_ids.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// Fields OpenAI defines that this server does not implement yet: refused, never ignored.
bool not_implemented(std::string_view k, Endpoint e) {
  static constexpr std::string_view kChat[] = {
      "functions",  "function_call", "response_format",   "audio",
      "modalities", "prediction",    "reasoning_effort",  "service_tier",
      "store",      "metadata",      "web_search_options"};
  static constexpr std::string_view kCompletion[] = {"suffix"};
  for (auto s : kChat)
    if (k == s && e == Endpoint::kChat) return true;
  for (auto s : kCompletion)
    if (k == s && e == Endpoint::kCompletion) return true;
  return false;
}

Fail parse_field(const std::string& k, const json& v, CompletionRequest& r, int64_t& max_tokens,
                 int64_t& max_completion_tokens, bool& has_stream_options, int64_t& top_logprobs) {
  const bool chat = r.endpoint == Endpoint::kChat;
  if (k == "model") {
    std::string m;
    if (auto f = get_string(k, v, m)) return f;
    r.model = m;
  } else if (chat && k == "messages") {
    return parse_messages(v, r.messages);
  } else if (!chat && k == "prompt") {
    return parse_prompt(v, r);
  } else if (k == "max_tokens") {
    return get_int(k, v, 1, kMaxTokensLimit, max_tokens);
  } else if (chat && k == "max_completion_tokens") {
    return get_int(k, v, 1, kMaxTokensLimit, max_completion_tokens);
  } else if (k == "temperature") {
    return get_number(k, v, 0, 2, false, r.sampling.temperature);
  } else if (k == "top_p") {
    return get_number(k, v, 0, 1, true, r.sampling.top_p);
  } else if (k == "min_p") {
    return get_number(k, v, 0, 1, false, r.sampling.min_p);
  } else if (k == "top_k") {
    int64_t kk = 0;
    if (auto f = get_int(k, v, -1, std::numeric_limits<int32_t>::max(), kk)) return f;
    r.sampling.top_k = std::max<int64_t>(kk, 0);  // -1 (vLLM's "off") as 0
  } else if (k == "seed") {
    int64_t s = 0;
    if (v.is_number_unsigned()) {
      r.sampling.seed = v.get<uint64_t>();
    } else {
      if (auto f = get_int(k, v, std::numeric_limits<int64_t>::min(),
                           std::numeric_limits<int64_t>::max(), s))
        return f;
      r.sampling.seed = static_cast<uint64_t>(s);
    }
    r.seeded = true;
  } else if (k == "stop") {
    return parse_stop(v, r.stop);
  } else if (k == "presence_penalty") {
    return get_number(k, v, -2, 2, false, r.adjust.presence_penalty);
  } else if (k == "frequency_penalty") {
    return get_number(k, v, -2, 2, false, r.adjust.frequency_penalty);
  } else if (k == "logit_bias") {
    return parse_logit_bias(v, r.adjust);
  } else if (k == "n") {
    int64_t n = 0;
    if (auto f = get_int(k, v, 1, kMaxChoices, n)) return f;
    r.n = static_cast<int>(n);
  } else if (!chat && k == "best_of") {
    int64_t n = 0;
    if (auto f = get_int(k, v, 1, kMaxChoices, n)) return f;
    if (n > 1) return unsupported(k, " above 1 (use n)");
  } else if (k == "stream") {
    return get_bool(k, v, r.stream);
  } else if (k == "stream_options") {
    if (!v.is_object()) return wrong_type(k, "an object", v);
    has_stream_options = true;
    for (const auto& [sk, sv] : v.items()) {
      const std::string p = "stream_options." + sk;
      if (sk == "include_usage") {
        if (auto f = get_bool(p, sv, r.include_usage)) return f;
      } else if (sk == "continuous_usage_stats" || sk == "include_obfuscation") {
        if (!sv.is_boolean()) return wrong_type(p, "a boolean", sv);
        if (sv.get<bool>() && sk == "continuous_usage_stats") return unsupported(p, " yet");
      } else {
        return bad_request(p, "unknown_parameter", fmt::format("unknown field '{}'", p));
      }
    }
  } else if (k == "user") {
    std::string u;
    return get_string(k, v, u);
  } else if (k == "logprobs") {
    if (chat) {
      bool lp = false;
      if (auto f = get_bool(k, v, lp)) return f;
      r.top_logprobs = lp ? 0 : -1;
    } else {
      int64_t n = 0;
      if (auto f = get_int(k, v, 0, kMaxTopLogprobs, n)) return f;
      r.top_logprobs = static_cast<int>(n);
    }
  } else if (chat && k == "top_logprobs") {
    int64_t n = 0;
    if (auto f = get_int(k, v, 0, kMaxTopLogprobs, n)) return f;
    top_logprobs = n;
  } else if (!chat && k == "echo") {
    return get_bool(k, v, r.echo);
  } else if (k == "ignore_eos") {
    return get_bool(k, v, r.ignore_eos);
  } else if (chat && k == "tools") {
    return parse_tools(v, r.tools);
  } else if (chat && k == "tool_choice") {
    if (v.is_string() && (v == "none" || v == "auto")) {
      r.tool_choice_none = v == "none";
    } else if (v.is_string() && v == "required") {
      return unsupported(k, " as 'required' (only 'auto' and 'none')");
    } else if (v.is_object()) {
      return unsupported(k, " naming a function (only 'auto' and 'none')");
    } else {
      return bad_value(k, "must be 'none', 'auto', 'required' or a function");
    }
  } else if (chat && k == "parallel_tool_calls") {
    bool b = true;
    return get_bool(k, v, b);
  } else if (not_implemented(k, r.endpoint)) {
    return unsupported(k, " yet");
  } else {
    return bad_request(k, "unknown_parameter", fmt::format("unknown field '{}'", k));
  }
  return std::nullopt;
}

std::variant<json, ApiError> parse_object(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return ApiError{400, "the body is not valid JSON (UTF-8, no NaN, no trailing commas)",
                    "invalid_request_error", std::nullopt, "invalid_json"};
  if (!j.is_object())
    return ApiError{400, fmt::format("the body must be a JSON object, got {}", j.type_name()),
                    "invalid_request_error", std::nullopt, "invalid_json"};
  return j;
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   Endpoint endpoint) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  CompletionRequest r;
  r.endpoint = endpoint;
  r.sampling.temperature = 1.0;
  int64_t max_tokens = 0, max_completion_tokens = 0;
  bool has_stream_options = false;
  int64_t top_logprobs = -1;
  for (const auto& [k, v] : j.items()) {
    if (v.is_null()) continue;  // null: absent, as OpenAI
    if (auto f = parse_field(k, v, r, max_tokens, max_completion_tokens, has_stream_options,
                             top_logprobs))
      return *f;
  }
  if (top_logprobs >= 0) {
    if (r.top_logprobs < 0) return bad_value("top_logprobs", "needs 'logprobs': true");
    r.top_logprobs = static_cast<int>(top_logprobs);
  }
  if (r.echo && r.top_logprobs >= 0)
    return unsupported("echo", " together with 'logprobs' (the prompt's log-probabilities)");
  const char* required = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (!j.contains(required) || j[required].is_null())
    return bad_request(required, "missing_required_parameter",
                       fmt::format("'{}' is required", required));
  if (max_tokens > 0 || max_completion_tokens > 0) {
    // Both given: the tighter one (max_tokens is the older name of the same ceiling).
    r.max_tokens = max_tokens == 0              ? max_completion_tokens
                   : max_completion_tokens == 0 ? max_tokens
                                                : std::min(max_tokens, max_completion_tokens);
  }
  if (has_stream_options && !r.stream)
    return bad_value("stream_options", "is only allowed when 'stream' is true");
  return r;
}

std::variant<TokenizeRequest, ApiError> parse_tokenize_request(std::string_view body) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  TokenizeRequest r;
  bool has_content = false;
  for (const auto& [k, v] : j.items()) {
    if (k == "content") {
      if (auto f = get_string(k, v, r.content)) return *f;
      has_content = true;
    } else if (k == "add_special") {
      if (auto f = get_bool(k, v, r.add_special)) return *f;
    } else if (k != "model") {
      return bad_request(k, "unknown_parameter", fmt::format("unknown field '{}'", k));
    }
  }
  if (!has_content)
    return bad_request("content", "missing_required_parameter", "'content' is required");
  return r;
}

std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(std::string_view body) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  std::vector<int32_t> ids;
  bool has_tokens = false;
  for (const auto& [k, v] : j.items()) {
    if (k == "tokens") {
      if (!v.is_array()) return wrong_type(k, "an array of token ids", v);
      for (size_t i = 0; i < v.size(); ++i) {
        int64_t id = 0;
        if (auto f = get_int(fmt::format("tokens[{}]", i), v[i], 0,
                             std::numeric_limits<int32_t>::max(), id))
          return *f;
        ids.push_back(static_cast<int32_t>(id));
      }
      has_tokens = true;
    } else if (k != "model") {
      return bad_request(k, "unknown_parameter", fmt::format("unknown field '{}'", k));
    }
  }
  if (!has_tokens)
    return bad_request("tokens", "missing_required_parameter", "'tokens' is required");
  return ids;
}

}  // namespace tq::serve
