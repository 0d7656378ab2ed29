#pragma once
// A plain blocking HTTP/1.1 client for tests: one request per call, its own connection, a deadline.

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace changeflow::testing {

struct http_result {
  int status = 0;  // 0 = transport error (see error)
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string error;

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
  /// The body parsed as JSON; an empty object when it is not JSON.
  nlohmann::json json_body() const {
    auto j = nlohmann::json::parse(body, nullptr, false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  }
  /// `data.outcome` of an enveloped answer (callbacks, webhooks); "" when absent.
  std::string outcome() const {
    auto j = json_body();
    return j.contains("data") && j["data"].contains("outcome") && j["data"]["outcome"].is_string()
               ? j["data"]["outcome"].get<std::string>()
               : std::string();
  }
};

http_result http_call(const std::string& host, unsigned short port, const std::string& method,
                      const std::string& target, const std::string& body = {},
                      const std::vector<std::pair<std::string, std::string>>& headers = {},
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

/// Sends raw bytes and returns whatever the server answers before closing or the deadline.
std::string raw_exchange(const std::string& host, unsigned short port, const std::string& bytes,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

}  // namespace changeflow::testing
