#pragma once
// A small blocking HTTP/1.1 client (plain and TLS) for the external-call worker threads.
//
// One instance per worker thread, never shared: it owns its io_context and keeps at most one idle
// keep-alive connection per scheme+host+port. Every call has a connect deadline (which covers the
// TLS handshake) and a total deadline and a bounded response size. TLS always verifies the peer:
// its chain against the system CAs (plus an optional CA bundle file) and its name against the host. Transport failures come back as `call_error` values; any HTTP status is
// a response (the caller decides what a 404 or a 409 means).
//
// A cached connection is reused only if it is still quiet (no EOF or stray bytes pending); the
// client never re-sends a request on its own, because a POST whose response was lost may already
// have taken effect — retrying is the caller's decision, made against remote state.

#include "clients/result.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace changeflow::clients {

/// `http://host:port/base` or `https://host:port/base` split into parts; base_path has no trailing
/// '/'. The port defaults to 80 for http and 443 for https.
struct url_parts {
  std::string host;
  std::uint16_t port = 80;
  std::string base_path;
  bool tls = false;
};
std::optional<url_parts> parse_url(std::string_view url);

/// Percent-encodes everything except unreserved characters (RFC 3986), so "a/b" -> "a%2Fb".
std::string url_encode(std::string_view s);

struct http_request {
  std::string method = "GET";
  std::string target;  // path and query, already encoded
  std::string body;    // sent as application/json when not empty
  std::vector<std::pair<std::string, std::string>> headers;
};

/// The request as the client writes it on a plain connection: HTTP/1.1, keep-alive, Host,
/// User-Agent and Accept unless the request names its own, then the request's headers (a later
/// one of a name replaces an earlier), Content-Type application/json with a body, Content-Length
/// for a body (and for POST, PUT and OPTIONS without one), then the body. Content-Length,
/// Transfer-Encoding and Connection are the client's. What HTTP does not allow in a header is
/// dropped (base/http_field.hpp).
std::string request_text(const http_request& req, const std::string& host_port);

struct http_response {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string header(const std::string& lower_name) const;
};

struct transport_limits {
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds request_timeout{10000};  // total: connect + write + read
  std::uint64_t max_response_bytes = 4 * 1024 * 1024;
};

class http_client {
 public:
  /// `ca_file`: a PEM bundle trusted in addition to the system CAs for https calls; empty -> system
  /// CAs only. Read on the first https call; an unreadable file fails that call (and the next ones).
  explicit http_client(std::string ca_file = {});
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  /// Sends one request to host:port and reads one response. Never throws.
  result<http_response> call(const url_parts& server, const http_request& req, const transport_limits& limits);

  /// Drops every cached connection (tests, and after a configuration change of addresses).
  void close_all();
  /// Connections opened so far (lets tests check keep-alive reuse).
  std::uint64_t connections_opened() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Builds the error for a non-success response: remote message ("message", then "error"; strings,
/// arrays and objects flattened), retryable for 5xx and 429, Retry-After parsed.
call_error status_error(const http_response& r);
/// The remote message of an error body, flattened to one line; a non-JSON body is returned trimmed.
std::string remote_message(std::string_view body);

}  // namespace changeflow::clients
