// Errors are values: every fallible library call returns Result<T> (or Status).
// The CLI prints Error::message as one line; messages name the file and the problem.
#pragma once

#include <fmt/format.h>

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace tq {

struct Error {
  std::string message;
};

// Builds an Error from a fmt format string: tq::err("{}: header length {} past EOF", path, n).
template <typename... Args>
Error err(fmt::format_string<Args...> f, Args&&... args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error e) : v_(std::move(e)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Error> v_;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : err_(std::move(e)), failed_(true) {}
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool failed_ = false;
};

inline Status ok_status() { return Status(); }

}  // namespace tq

#define TQ_CONCAT_INNER_(a, b) a##b
#define TQ_CONCAT_(a, b) TQ_CONCAT_INNER_(a, b)

// TQ_TRY(auto x, expr): unwraps a Result or returns its Error from the enclosing function.
#define TQ_TRY(lhs, expr) TQ_TRY_IMPL_(TQ_CONCAT_(tq_try_, __LINE__), lhs, expr)
#define TQ_TRY_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                 \
  if (!tmp.ok()) return tmp.error(); \
  lhs = std::move(tmp).value()

// TQ_CHECK_OK(expr): returns the Error of a failed Status/Result from the enclosing function.
#define TQ_CHECK_OK(expr)                            \
  do {                                               \
    auto tq_status_ = (expr);                        \
    if (!tq_status_.ok()) return tq_status_.error(); \
  } while (0)
