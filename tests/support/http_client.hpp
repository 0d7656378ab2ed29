#pragma once
// A plain blocking HTTP/1.1 client for tests: one request per call, its own connection, a deadline.

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
};

http_result http_call(const std::string& host, unsigned short port, const std::string& method,
                      const std::string& target, const std::string& body = {},
                      const std::vector<std::pair<std::string, std::string>>& headers = {},
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

/// Sends raw bytes and returns whatever the server answers before closing or the deadline.
std::string raw_exchange(const std::string& host, unsigned short port, const std::string& bytes,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

}  // namespace changeflow::testing
