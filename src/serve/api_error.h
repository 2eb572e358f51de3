// Errors as OpenAI's API returns them: an HTTP status and {"error": {"message", "type", "param",
// "code"}}. Every failure a client can cause ends as one of these, never as a crash or a 500.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tq::serve {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::optional<std::string> param;  // the request field at fault (null when none)
  std::string code;                  // e.g. invalid_value, context_length_exceeded
};

// 400 invalid_request_error naming `param`.
ApiError bad_request(std::string param, std::string code, std::string message);

// {"error": {...}} (dump it with error_handler_t::replace: a message may quote client bytes).
nlohmann::json error_body(const ApiError& e);

}  // namespace tq::serve
