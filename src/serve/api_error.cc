#include "serve/api_error.h"

namespace tq::serve {

ApiError bad_request(std::string param, std::string code, std::string message) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

nlohmann::json error_body(const ApiError& e) {
  nlohmann::json err = {
      {"message", e.message},
      {"type", e.type},
      {"param", e.param ? nlohmann::json(*e.param) : nlohmann::json(nullptr)},
      {"code", e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code)}};
  return {{"error", std::move(err)}};
}

}  // namespace tq::serve
