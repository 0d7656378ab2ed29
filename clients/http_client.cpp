#include "clients/http_client.hpp"
#include "clients/request_message.hpp"

#include "base/http_field.hpp"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace changeflow::clients {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;
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
  constexpr std::string_view plain_scheme = "http://";
  constexpr std::string_view tls_scheme = "https://";
  url_parts out;
  if (url.substr(0, plain_scheme.size()) == plain_scheme) {
    url.remove_prefix(plain_scheme.size());
  } else if (url.substr(0, tls_scheme.size()) == tls_scheme) {
    url.remove_prefix(tls_scheme.size());
    out.tls = true;
    out.port = 443;
  } else {
    return std::nullopt;
  }
  auto slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : url.substr(slash);
  if (authority.empty()) return std::nullopt;
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

std::string request_text(const http_request& req, const std::string& host_port) {
  // The fields in the order a later setting of a name leaves them: it replaces the earlier one and
  // goes last.
  std::vector<std::pair<std::string_view, std::string_view>> fields = {
      {"Host", host_port}, {"User-Agent", "changeflow"}, {"Accept", "application/json"}};
  auto set = [&fields](std::string_view name, std::string_view value) {
    fields.erase(
        std::remove_if(fields.begin(), fields.end(), [name](const auto& f) { return same_http_name(f.first, name); }),
        fields.end());
    fields.emplace_back(name, value);
  };
  for (const auto& [name, value] : req.headers) {
    if (same_http_name(name, "content-length") || same_http_name(name, "transfer-encoding") ||
        same_http_name(name, "connection"))
      continue;
    set(name, value);
  }
  if (!req.body.empty()) set("Content-Type", "application/json");
  std::string out;
  out.reserve(256 + req.body.size());
  out += req.method;
  out += ' ';
  out += req.target.empty() ? std::string_view("/") : std::string_view(req.target);  // an empty path is "/"
  out += " HTTP/1.1\r\n";
  for (const auto& [name, value] : fields) append_http_field(out, name, value);
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "OPTIONS") {
    out += "Content-Length: ";
    out += std::to_string(req.body.size());
    out += "\r\n";
  }
  out += "\r\n";
  out += req.body;
  return out;
}

bhttp::request<bhttp::string_body> request_message(const http_request& req, const std::string& host_port) {
  bhttp::request<bhttp::string_body> msg;
  msg.method(bhttp::string_to_verb(req.method));
  msg.target(req.target.empty() ? std::string("/") : req.target);
  msg.version(11);
  msg.set(bhttp::field::host, host_port);
  msg.set(bhttp::field::user_agent, "changeflow");
  msg.set(bhttp::field::accept, "application/json");
  for (const auto& [name, value] : req.headers) msg.set(name, value);
  if (!req.body.empty()) msg.set(bhttp::field::content_type, "application/json");
  msg.body() = req.body;
  msg.keep_alive(true);
  msg.prepare_payload();
  return msg;
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
  // Exactly one of `plain` and `tls` is set on an open connection.
  struct connection {
    std::unique_ptr<beast::tcp_stream> plain;
    std::unique_ptr<tls_stream> tls;
    beast::flat_buffer buffer;

    bool is_open() const { return plain || tls; }
    beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  };

  explicit impl(std::string ca) : ca_file(std::move(ca)) {}

  net::io_context ioc;
  std::string ca_file;
  std::unique_ptr<ssl::context> tls_context;  // built on the first https call
  std::map<std::string, connection> idle;     // one idle keep-alive connection per scheme+host+port
  std::uint64_t opened = 0;

  // An idle connection the server has closed (or that has unexpected bytes) is readable while we
  // are not reading; such a connection would fail the next request, so it is dropped instead. A TLS
  // close_notify or alert makes the socket readable the same way.
  static bool still_quiet(connection& c) {
    if (!c.is_open() || !c.lowest().socket().is_open() || c.buffer.size() != 0) return false;
    pollfd p{};
    p.fd = c.lowest().socket().native_handle();
    p.events = POLLIN;
    return ::poll(&p, 1, 0) == 0;
  }

  void run_until_done() {
    ioc.restart();
    ioc.run();
  }

  result<ssl::context*> client_tls_context() {
    if (tls_context) return tls_context.get();
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
    beast::error_code ec;
    ctx->set_default_verify_paths(ec);
    if (ec) return transport_error(call_error::kind::protocol, "TLS setup failed: system CA paths: " + ec.message());
    if (!ca_file.empty()) {
      ctx->load_verify_file(ca_file, ec);
      if (ec) {
        return transport_error(call_error::kind::protocol,
                               "TLS setup failed: cannot load CA file " + ca_file + ": " + ec.message());
      }
    }
    ctx->set_verify_mode(ssl::verify_peer);
    ::SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
    tls_context = std::move(ctx);
    return tls_context.get();
  }

  // The handshake runs under the connect deadline: to the caller, a server that accepts TCP but
  // never completes TLS is as unreachable as one that never accepts.
  result<done> handshake(tls_stream& stream, const url_parts& server, clock_type::time_point connect_deadline) {
    beast::error_code ec;
    net::ip::make_address(server.host, ec);
    const bool is_address = !ec;
    // SNI carries names only (RFC 6066); the certificate is checked against names and addresses alike.
    if (!is_address && !::SSL_set_tlsext_host_name(stream.native_handle(), server.host.c_str())) {
      return transport_error(call_error::kind::protocol, "TLS setup failed: cannot set the server name");
    }
    stream.set_verify_mode(ssl::verify_peer);
    stream.set_verify_callback(ssl::host_name_verification(server.host));
    beast::get_lowest_layer(stream).expires_at(connect_deadline);
    beast::error_code handshake_ec;
    stream.async_handshake(ssl::stream_base::client, [&](beast::error_code e) { handshake_ec = e; });
    run_until_done();
    if (!handshake_ec) return done{};
    if (handshake_ec == beast::error::timeout) {
      return transport_error(call_error::kind::timeout, "TLS handshake timed out");
    }
    if (handshake_ec == net::error::eof || handshake_ec == net::error::connection_reset ||
        handshake_ec == ssl::error::stream_truncated) {
      return transport_error(call_error::kind::reset, "connection closed during TLS handshake");
    }
    // A refused certificate will be refused again: not retryable, and the verifier's reason (unknown
    // issuer, name mismatch, expired) is named so an operator can fix the trust or the address.
    std::string message = "TLS handshake failed: " + handshake_ec.message();
    long verify = ::SSL_get_verify_result(stream.native_handle());
    if (verify != X509_V_OK) message += ": " + std::string(::X509_verify_cert_error_string(verify));
    return transport_error(call_error::kind::protocol, std::move(message));
  }

  result<connection> connect(const url_parts& server, clock_type::time_point deadline, const transport_limits& limits) {
    ssl::context* tls_ctx = nullptr;
    if (server.tls) {
      auto ctx = client_tls_context();
      if (!ctx) return ctx.error();
      tls_ctx = ctx.value();
    }
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
    if (tls_ctx) {
      c.tls = std::make_unique<tls_stream>(ioc, *tls_ctx);
    } else {
      c.plain = std::make_unique<beast::tcp_stream>(ioc);
    }
    auto now = clock_type::now();
    auto connect_deadline = std::min(deadline, now + limits.connect_timeout);
    c.lowest().expires_at(connect_deadline);
    beast::error_code connect_ec;
    c.lowest().async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { connect_ec = e; });
    run_until_done();
    if (connect_ec == beast::error::timeout) return transport_error(call_error::kind::timeout, "connect timed out");
    if (connect_ec) return transport_error(call_error::kind::refused, "connect failed: " + connect_ec.message());
    ++opened;
    if (c.tls) {
      auto shaken = handshake(*c.tls, server, connect_deadline);
      if (!shaken) return shaken.error();
    }
    return c;
  }

  template <class Stream>
  result<http_response> exchange(Stream& stream, beast::flat_buffer& buffer, bhttp::request<bhttp::string_body>& msg,
                                 const transport_limits& limits, bool& keep) {
    beast::error_code write_ec;
    bhttp::async_write(stream, msg, [&](beast::error_code e, std::size_t) { write_ec = e; });
    run_until_done();
    if (write_ec) return classify(write_ec, "write");

    answer_parser parser;
    prepare(parser, msg.method() == bhttp::verb::head, limits);
    // Read and parse by hand, as the plain path does: http::async_read makes the parser eager (see
    // prepare); a TLS record easily carries a header and its body together.
    while (!parser.is_done()) {
      beast::error_code ec = feed(parser, buffer);
      if (ec) return classify(ec, "read");
      if (parser.is_done()) break;
      std::size_t got = 0;
      beast::error_code read_ec;
      stream.async_read_some(buffer.prepare(16 * 1024), [&](beast::error_code e, std::size_t n) {
        read_ec = e;
        got = n;
      });
      run_until_done();
      buffer.commit(got);
      if (read_ec == net::error::eof || read_ec == ssl::error::stream_truncated) {
        // A response that ends with the connection (no length) is complete at its end; any other is cut.
        if (got > 0) continue;
        if (!parser.is_header_done() || !parser.need_eof()) return classify(read_ec, "read");
        parser.put_eof(ec);
        if (ec) return classify(read_ec, "read");
        break;
      }
      if (read_ec) return classify(read_ec, "read");
    }

    keep = parser.get().keep_alive() && !parser.need_eof() && buffer.size() == 0;
    return answer_of(parser.get());
  }

  using answer_parser = bhttp::response_parser<bhttp::string_body>;

  /// The parser's limits for one answer. It is not eager (both paths put by hand): Beast 1.74 skips
  /// the body limit of a Content-Length answer whose header and body are parsed in one put, and a
  /// parser that is not eager stops after the header, where the limit is checked.
  static void prepare(answer_parser& parser, bool head, const transport_limits& limits) {
    parser.body_limit(limits.max_response_bytes);
    parser.header_limit(64 * 1024);
    // The answer to a HEAD names the length of a body it does not carry.
    parser.skip(head);
  }

  /// Hands the parser what `buffer` holds, as far as it takes it; what it took leaves the buffer.
  /// Needing more input is no error.
  template <class Buffer>
  static beast::error_code feed(answer_parser& parser, Buffer& buffer) {
    beast::error_code ec;
    while (buffer.size() > 0 && !parser.is_done()) {
      std::size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == bhttp::error::need_more) return {};
      if (ec || used == 0) return ec;
    }
    return ec;
  }

  /// The parsed answer as the callers see it: status, headers by lower-case name, body.
  static http_response answer_of(bhttp::response<bhttp::string_body>& res) {
    http_response out;
    out.status = static_cast<int>(res.result_int());
    for (const auto& field : res) {
      std::string name(field.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      out.headers[name] = std::string(field.value());
    }
    out.body = std::move(res.body());
    return out;
  }

  /// Waits until `fd` is ready for `events` or `deadline` passes: 1 ready, 0 timed out, -1 failed.
  static int wait_ready(int fd, short events, clock_type::time_point deadline) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
      if (left <= 0) return 0;
      pollfd p{};
      p.fd = fd;
      p.events = events;
      int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, 60000)));
      if (n > 0) return 1;
      if (n < 0 && errno != EINTR) return -1;
    }
  }

  /// One request and its response on a plain keep-alive connection, on the calling thread with the
  /// socket itself: a send, then a poll and a recv per piece of the answer (usually one), each wait
  /// bounded by the call's deadline. The event loop the TLS path runs costs, per call, a timer armed
  /// and moved per operation (a timerfd update each), a receive tried before any answer could be
  /// there, and several empty epoll passes: about twelve system calls where these take four.
  result<http_response> exchange_plain(connection& c, const std::string& wire, bool head,
                                       const transport_limits& limits, clock_type::time_point deadline, bool& keep) {
    const int fd = c.plain->socket().native_handle();
    for (std::size_t sent = 0; sent < wire.size();) {
      ssize_t n = ::send(fd, wire.data() + sent, wire.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        int ready = wait_ready(fd, POLLOUT, deadline);
        if (ready == 0) return transport_error(call_error::kind::timeout, "write timed out");
        if (ready > 0) continue;
      }
      if (n < 0 && errno != EPIPE && errno != ECONNRESET) {
        return transport_error(call_error::kind::protocol, std::string("write failed: ") + std::strerror(errno));
      }
      return transport_error(call_error::kind::reset, "connection closed during write");
    }

    answer_parser parser;
    prepare(parser, head, limits);
    // The connection's buffer holds what arrived and the parser has not taken yet (a header block
    // is parsed only whole); after the response it must be empty for the connection to be reused.
    auto& pending = c.buffer;
    pending.consume(pending.size());
    while (!parser.is_done()) {
      int ready = wait_ready(fd, POLLIN, deadline);
      if (ready == 0) return transport_error(call_error::kind::timeout, "read timed out");
      if (ready < 0)
        return transport_error(call_error::kind::protocol, std::string("read failed: ") + std::strerror(errno));
      auto space = pending.prepare(16 * 1024);
      ssize_t n = ::recv(fd, space.data(), space.size(), 0);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        if (errno == ECONNRESET || errno == EPIPE)
          return transport_error(call_error::kind::reset, "connection closed during read");
        return transport_error(call_error::kind::protocol, std::string("read failed: ") + std::strerror(errno));
      }
      beast::error_code ec;
      if (n == 0) {
        // A response that ends with the connection (no length) is complete at EOF; any other is cut.
        if (!parser.is_header_done() || !parser.need_eof()) {
          return transport_error(call_error::kind::reset, "connection closed during read");
        }
        parser.put_eof(ec);
        if (ec) return transport_error(call_error::kind::reset, "connection closed during read");
        break;
      }
      pending.commit(static_cast<std::size_t>(n));
      ec = feed(parser, pending);
      if (ec) return classify(ec, "read");
    }
    keep = parser.get().keep_alive() && !parser.need_eof() && pending.size() == 0;
    return answer_of(parser.get());
  }

  result<http_response> call(const url_parts& server, const http_request& req, const transport_limits& limits) {
    auto verb = bhttp::string_to_verb(req.method);
    if (verb == bhttp::verb::unknown) return transport_error(call_error::kind::invalid_argument, "bad method");
    // The request line carries the target as it is: a space or a control byte in it would end the
    // line or the target early.
    if (std::any_of(req.target.begin(), req.target.end(), [](char c) {
          const auto u = static_cast<unsigned char>(c);
          return u <= 0x20 || u == 0x7f;
        }))
      return transport_error(call_error::kind::invalid_argument, "bad target");
    auto deadline = clock_type::now() + limits.request_timeout;
    std::string host_port = server.host + ":" + std::to_string(server.port);
    std::string key = (server.tls ? "https://" : "http://") + host_port;
    connection conn;
    if (auto it = idle.find(key); it != idle.end()) {
      if (still_quiet(it->second)) conn = std::move(it->second);
      idle.erase(it);
    }
    if (!conn.is_open()) {
      auto fresh = connect(server, deadline, limits);
      if (!fresh) return fresh.error();
      conn = std::move(fresh.value());
    }

    bool keep = false;
    if (conn.plain) {
      auto answer =
          exchange_plain(conn, request_text(req, host_port), verb == bhttp::verb::head, limits, deadline, keep);
      if (answer && keep) idle[key] = std::move(conn);
      return answer;
    }
    auto msg = request_message(req, host_port);
    conn.lowest().expires_at(deadline);
    auto answer = exchange(*conn.tls, conn.buffer, msg, limits, keep);
    if (answer && keep) {
      conn.lowest().expires_never();
      idle[key] = std::move(conn);
    }
    return answer;
  }

  static call_error classify(const beast::error_code& ec, const char* phase) {
    if (ec == beast::error::timeout)
      return transport_error(call_error::kind::timeout, std::string(phase) + " timed out");
    // stream_truncated: the TLS peer closed the socket without close_notify, as a plain peer's EOF.
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::broken_pipe || ec == bhttp::error::partial_message || ec == ssl::error::stream_truncated) {
      return transport_error(call_error::kind::reset, std::string("connection closed during ") + phase);
    }
    if (ec == bhttp::error::body_limit) return transport_error(call_error::kind::protocol, "response too large");
    return transport_error(call_error::kind::protocol, std::string(phase) + " failed: " + ec.message());
  }
};

http_client::http_client(std::string ca_file) : impl_(std::make_unique<impl>(std::move(ca_file))) {}
http_client::~http_client() = default;

result<http_response> http_client::call(const url_parts& server, const http_request& req,
                                        const transport_limits& limits) {
  try {
    return impl_->call(server, req, limits);
  } catch (const std::exception& e) {
    // Asio/Beast/OpenSSL may throw on resource exhaustion (e.g. no file descriptors); keep it a value.
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
