#include "clients/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <poll.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace changeflow::clients {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using clock_type = std::chrono::steady_clock;

std::string_view to_string(call_error::kind k) {
  switch (k) {
    case call_error::kind::http_status: return "http_status";
    case call_error::kind::timeout: return "timeout";
    case call_error::kind::refused: return "refused";
    case call_error::kind::reset: return "reset";
    case call_error::kind::protocol: return "protocol";
    case call_error::kind::breaker_open: return "breaker_open";
    case call_error::kind::invalid_argument: return "invalid_argument";
  }
  return "unknown";
}

std::string describe(const call_error& e) {
  std::string out(to_string(e.what));
  if (e.status != 0) out += " " + std::to_string(e.status);
  if (!e.message.empty()) out += ": " + e.message;
  return out;
}

std::optional<url_parts> parse_url(std::string_view url) {
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) != scheme) return std::nullopt;  // no TLS yet: refuse https explicitly
  url.remove_prefix(scheme.size());
  auto slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : url.substr(slash);
  if (authority.empty()) return std::nullopt;
  url_parts out;
  auto colon = authority.rfind(':');
  if (colon == std::string_view::npos) {
    out.host = std::string(authority);
  } else {
    out.host = std::string(authority.substr(0, colon));
    auto port_text = authority.substr(colon + 1);
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535) {
      return std::nullopt;
    }
    out.port = static_cast<std::uint16_t>(port);
  }
  if (out.host.empty()) return std::nullopt;
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  out.base_path = std::string(path);
  return out;
}

std::string url_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string http_response::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

namespace {

// Depth-limited: a hostile or broken upstream can nest arrays a million deep inside its 4 MiB
// answer, and unbounded recursion overflowed the stack (fuzz_gitlab,
// regression-error-message-deep-nesting).
std::string flatten(const nlohmann::json& j, int depth = 0) {
  if (j.is_string()) return j.get<std::string>();
  if (depth >= 8 && (j.is_array() || j.is_object())) return "...";
  std::string out;
  if (j.is_array()) {
    for (const auto& item : j) {
      if (!out.empty()) out += "; ";
      out += flatten(item, depth + 1);
    }
    return out;
  }
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      if (!out.empty()) out += "; ";
      out += key + ": " + flatten(value, depth + 1);
    }
    return out;
  }
  return j.is_null() ? std::string() : j.dump();
}

std::string one_line(std::string_view s, std::size_t max) {
  std::string out(s.substr(0, max));
  for (auto& c : out) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  auto first = out.find_first_not_of(' ');
  auto last = out.find_last_not_of(' ');
  return first == std::string::npos ? std::string() : out.substr(first, last - first + 1);
}

call_error transport_error(call_error::kind k, std::string message) {
  call_error e;
  e.what = k;
  e.message = std::move(message);
  e.retryable = k == call_error::kind::timeout || k == call_error::kind::refused || k == call_error::kind::reset;
  return e;
}

}  // namespace

std::string remote_message(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return one_line(body, 300);
  if (j.contains("message")) return one_line(flatten(j["message"]), 1000);
  if (j.contains("error")) return one_line(flatten(j["error"]), 1000);
  return one_line(body, 300);
}

call_error status_error(const http_response& r) {
  call_error e;
  e.what = call_error::kind::http_status;
  e.status = r.status;
  e.message = remote_message(r.body);
  e.retryable = r.status >= 500 || r.status == 429;
  e.body = r.body.substr(0, 64 * 1024);
  auto retry_after = r.header("retry-after");
  int seconds = 0;
  auto [end, ec] = std::from_chars(retry_after.data(), retry_after.data() + retry_after.size(), seconds);
  // Only the delta-seconds form is used by GitLab; an HTTP-date is ignored (the caller's backoff applies).
  if (!retry_after.empty() && ec == std::errc() && end == retry_after.data() + retry_after.size() && seconds >= 0) {
    e.retry_after_seconds = seconds;
  }
  return e;
}

struct http_client::impl {
  struct connection {
    std::unique_ptr<beast::tcp_stream> stream;
    beast::flat_buffer buffer;
  };

  net::io_context ioc;
  std::map<std::string, connection> idle;  // one idle keep-alive connection per host:port
  std::uint64_t opened = 0;

  // An idle connection the server has closed (or that has unexpected bytes) is readable while we
  // are not reading; such a connection would fail the next request, so it is dropped instead.
  static bool still_quiet(connection& c) {
    if (!c.stream || !c.stream->socket().is_open() || c.buffer.size() != 0) return false;
    pollfd p{};
    p.fd = c.stream->socket().native_handle();
    p.events = POLLIN;
    return ::poll(&p, 1, 0) == 0;
  }

  void run_until_done() {
    ioc.restart();
    ioc.run();
  }

  result<connection> connect(const url_parts& server, clock_type::time_point deadline, const transport_limits& limits) {
    beast::error_code ec;
    std::vector<tcp::endpoint> endpoints;
    auto address = net::ip::make_address(server.host, ec);
    if (!ec) {
      endpoints.emplace_back(address, server.port);
    } else {
      // Name resolution has no deadline in Asio; the configured addresses are IPs or local names.
      tcp::resolver resolver(ioc);
      auto resolved = resolver.resolve(server.host, std::to_string(server.port), ec);
      if (ec) return transport_error(call_error::kind::refused, "cannot resolve " + server.host);
      for (const auto& entry : resolved) endpoints.push_back(entry.endpoint());
    }
    connection c;
    c.stream = std::make_unique<beast::tcp_stream>(ioc);
    auto now = clock_type::now();
    auto connect_deadline = std::min(deadline, now + limits.connect_timeout);
    c.stream->expires_at(connect_deadline);
    beast::error_code connect_ec;
    c.stream->async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { connect_ec = e; });
    run_until_done();
    if (connect_ec == beast::error::timeout) return transport_error(call_error::kind::timeout, "connect timed out");
    if (connect_ec) return transport_error(call_error::kind::refused, "connect failed: " + connect_ec.message());
    ++opened;
    return c;
  }

  result<http_response> call(const url_parts& server, const http_request& req, const transport_limits& limits) {
    auto deadline = clock_type::now() + limits.request_timeout;
    std::string key = server.host + ":" + std::to_string(server.port);
    connection conn;
    if (auto it = idle.find(key); it != idle.end()) {
      if (still_quiet(it->second)) conn = std::move(it->second);
      idle.erase(it);
    }
    if (!conn.stream) {
      auto fresh = connect(server, deadline, limits);
      if (!fresh) return fresh.error();
      conn = std::move(fresh.value());
    }

    bhttp::request<bhttp::string_body> msg;
    auto verb = bhttp::string_to_verb(req.method);
    if (verb == bhttp::verb::unknown) return transport_error(call_error::kind::invalid_argument, "bad method");
    msg.method(verb);
    msg.target(req.target);
    msg.version(11);
    msg.set(bhttp::field::host, key);
    msg.set(bhttp::field::user_agent, "changeflow");
    msg.set(bhttp::field::accept, "application/json");
    for (const auto& [name, value] : req.headers) msg.set(name, value);
    if (!req.body.empty()) msg.set(bhttp::field::content_type, "application/json");
    msg.body() = req.body;
    msg.keep_alive(true);
    msg.prepare_payload();

    conn.stream->expires_at(deadline);
    beast::error_code write_ec;
    bhttp::async_write(*conn.stream, msg, [&](beast::error_code e, std::size_t) { write_ec = e; });
    run_until_done();
    if (write_ec) return classify(write_ec, "write");

    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(limits.max_response_bytes);
    parser.header_limit(64 * 1024);
    beast::error_code read_ec;
    bhttp::async_read(*conn.stream, conn.buffer, parser, [&](beast::error_code e, std::size_t) { read_ec = e; });
    run_until_done();
    if (read_ec) return classify(read_ec, "read");

    auto& res = parser.get();
    http_response out;
    out.status = static_cast<int>(res.result_int());
    for (const auto& field : res) {
      std::string name(field.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      out.headers[name] = std::string(field.value());
    }
    bool keep = res.keep_alive();
    out.body = std::move(res.body());
    if (keep) {
      conn.stream->expires_never();
      idle[key] = std::move(conn);
    }
    return out;
  }

  static call_error classify(const beast::error_code& ec, const char* phase) {
    if (ec == beast::error::timeout)
      return transport_error(call_error::kind::timeout, std::string(phase) + " timed out");
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::broken_pipe || ec == bhttp::error::partial_message) {
      return transport_error(call_error::kind::reset, std::string("connection closed during ") + phase);
    }
    if (ec == bhttp::error::body_limit) return transport_error(call_error::kind::protocol, "response too large");
    return transport_error(call_error::kind::protocol, std::string(phase) + " failed: " + ec.message());
  }
};

http_client::http_client() : impl_(std::make_unique<impl>()) {}
http_client::~http_client() = default;

result<http_response> http_client::call(const url_parts& server, const http_request& req,
                                        const transport_limits& limits) {
  try {
    return impl_->call(server, req, limits);
  } catch (const std::exception& e) {
    // Asio/Beast may throw on resource exhaustion (e.g. no file descriptors); keep it a value.
    impl_->idle.clear();
    return transport_error(call_error::kind::protocol, std::string("client failure: ") + e.what());
  }
}

void http_client::close_all() {
  impl_->idle.clear();
}
std::uint64_t http_client::connections_opened() const {
  return impl_->opened;
}

}  // namespace changeflow::clients
