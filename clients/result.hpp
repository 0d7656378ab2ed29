#pragma once
// Errors are values at the edge of clients/: every outbound call answers a `result<T>` holding either
// the value or a `call_error` from a closed set of kinds. No exception leaves this folder.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace changeflow::clients {

struct call_error {
  enum class kind {
    http_status,       // the system answered with a non-success status (see `status`)
    timeout,           // connect or total deadline passed
    refused,           // could not connect
    reset,             // the connection broke before a complete response (response lost)
    protocol,          // malformed or oversized response, or a body we cannot interpret
    breaker_open,      // the circuit breaker answered without a network call
    invalid_argument,  // the call could not be built (bad URL, missing setting)
  };
  kind what = kind::protocol;
  int status = 0;                          // HTTP status for http_status, else 0
  std::string message;                     // parsed remote message ("message" then "error"), or a transport description
  bool retryable = false;                  // 5xx, 429, timeout, refused, reset, breaker_open
  std::optional<int> retry_after_seconds;  // from Retry-After on 429/503
  std::string body;                        // raw response body (bounded), for callers that read structured errors
};

std::string_view to_string(call_error::kind k);
/// One line for logs: kind, status and message (never a token: requests are not echoed).
std::string describe(const call_error& e);

/// Unit value for calls that only succeed or fail.
struct done {};

template <class T>
class result {
 public:
  result(T value) : v_(std::move(value)) {}           // NOLINT: implicit on purpose
  result(call_error error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  const call_error& error() const { return std::get<1>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, call_error> v_;
};

}  // namespace changeflow::clients
