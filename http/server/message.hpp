#pragma once
// Plain request/response values exchanged between the transport and the handlers.
// Handlers never see Beast types, so routing and policy stay plain functions.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace changeflow::http_server {

struct request {
  std::string method;                                       // upper case: GET, POST, ...
  std::string target;                                       // raw request target: path and query
  std::string path;                                         // percent-decoded path without the query
  std::string query;                                        // raw query string without '?'
  std::map<std::string, std::string, std::less<>> headers;  // lower-case names; repeats joined by ", "
  std::string body;
  std::string peer_address;  // address of the TCP peer
  bool keep_alive = true;

  std::optional<std::string_view> header(std::string_view lower_name) const;
  /// Percent-decoded value of a query parameter.
  std::optional<std::string> query_param(std::string_view name) const;
};

struct response {
  unsigned status = 200;  // 0 = close the connection without a response (fault injection)
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  response& set_header(std::string name, std::string value);
};

/// Completes a request exactly once, from any thread. If every copy is dropped without a call, the
/// client gets a 500 so that a forgotten reply can never leave a connection hanging.
class responder {
 public:
  using sink = std::function<void(response)>;
  explicit responder(sink s);
  void operator()(response r) const;
  bool done() const;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

using handler = std::function<void(request&&, responder)>;

/// Percent-decodes a URL component; '+' is kept (paths) unless plus_is_space (query values).
std::string percent_decode(std::string_view in, bool plus_is_space = false);

}  // namespace changeflow::http_server
