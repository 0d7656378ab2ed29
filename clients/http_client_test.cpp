#include "clients/http_client.hpp"

#include <gtest/gtest.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace changeflow::clients;

TEST(ParseUrl, SplitsHostPortAndBasePath) {
  auto u = parse_url("http://127.0.0.1:9090/api/v4/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 9090);
  EXPECT_EQ(u->base_path, "/api/v4");

  auto no_port = parse_url("http://gitlab.local");
  ASSERT_TRUE(no_port);
  EXPECT_EQ(no_port->port, 80);
  EXPECT_EQ(no_port->base_path, "");
}

TEST(ParseUrl, RejectsWhatItCannotCall) {
  for (const char* bad : {"", "https://", "https://:443", "https://h:0", "http://", "http://:80", "http://h:0",
                          "http://h:70000", "http://h:1x", "ftp://h"}) {
    EXPECT_FALSE(parse_url(bad)) << bad;
  }
}

TEST(ParseUrl, HttpsDefaultsToPort443AndKeepsAnExplicitPort) {
  auto api = parse_url("https://gitlab.example.com/api/v4");
  ASSERT_TRUE(api);
  EXPECT_TRUE(api->tls);
  EXPECT_EQ(api->host, "gitlab.example.com");
  EXPECT_EQ(api->port, 443);
  EXPECT_EQ(api->base_path, "/api/v4");

  auto explicit_port = parse_url("https://127.0.0.1:8443/");
  ASSERT_TRUE(explicit_port);
  EXPECT_TRUE(explicit_port->tls);
  EXPECT_EQ(explicit_port->port, 8443);
  EXPECT_EQ(explicit_port->base_path, "");

  auto plain = parse_url("http://gitlab.example.com/api/v4");
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->tls);
  EXPECT_EQ(plain->port, 80);
}

TEST(UrlEncode, EncodesSlashesAndSpaces) {
  EXPECT_EQ(url_encode("config/changes"), "config%2Fchanges");
  EXPECT_EQ(url_encode("a b~c.d-e_f"), "a%20b~c.d-e_f");
}

TEST(RemoteMessage, ReadsMessageThenErrorInEveryShape) {
  struct row {
    const char* body;
    const char* expected;
  };
  for (auto [body, expected] : std::initializer_list<row>{
           {R"({"message":"404 Branch Not Found"})", "404 Branch Not Found"},
           {R"({"message":["Another open merge request already exists for this source branch: !7"]})",
            "Another open merge request already exists for this source branch: !7"},
           {R"({"message":{"title":["is too long"],"branch":["bad"]}})", "branch: bad; title: is too long"},
           {R"({"error":"title is missing"})", "title is missing"},
           {R"({"message":{"error":"rate limited"}})", "error: rate limited"},
           {"Retry later\n", "Retry later"},
           {R"({"other":1})", R"({"other":1})"},
       }) {
    EXPECT_EQ(remote_message(body), expected) << body;
  }
}

TEST(StatusError, RetryableForServerErrorsAndRateLimitsWithRetryAfter) {
  http_response r;
  r.status = 429;
  r.body = "Retry later";
  r.headers["retry-after"] = "7";
  auto e = status_error(r);
  EXPECT_EQ(e.what, call_error::kind::http_status);
  EXPECT_TRUE(e.retryable);
  ASSERT_TRUE(e.retry_after_seconds);
  EXPECT_EQ(*e.retry_after_seconds, 7);

  r.status = 503;
  r.headers["retry-after"] = "Wed, 21 Oct 2015 07:28:00 GMT";
  e = status_error(r);
  EXPECT_TRUE(e.retryable);
  EXPECT_FALSE(e.retry_after_seconds);

  r.status = 401;
  r.headers.clear();
  r.body = R"({"message":"401 Unauthorized"})";
  e = status_error(r);
  EXPECT_FALSE(e.retryable);
  EXPECT_EQ(e.status, 401);
  EXPECT_EQ(e.message, "401 Unauthorized");
}

TEST(HttpClient, RefusedConnectionIsARetryableValue) {
  http_client client;
  // Port 1 on loopback is closed on any sane test machine.
  auto r = client.call(url_parts{"127.0.0.1", 1, ""}, http_request{}, transport_limits{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::refused);
  EXPECT_TRUE(r.error().retryable);
}

namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
namespace ssl = net::ssl;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

// A throwaway CA and two server certificates signed by it, made with the openssl CLI in a fresh
// temporary directory (removed afterwards): one for 127.0.0.1/localhost, one for another host only.
struct test_pki {
  fs::path dir;
  std::string error;

  test_pki() {
    char tmpl[] = "/tmp/cf-tls-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      error = "mkdtemp failed";
      return;
    }
    dir = tmpl;
    const std::string d = dir.string();
    std::ofstream(dir / "local.ext") << "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n";
    std::ofstream(dir / "other.ext") << "basicConstraints=CA:FALSE\nsubjectAltName=DNS:other.example.com\n";
    const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string quiet = " >" + d + "/openssl.log 2>&1";
    run("openssl req -x509" + key + " -keyout " + d + "/ca.key -out " + d +
        "/ca.pem -days 2 -subj /CN=changeflow-test-ca" + quiet);
    for (const char* name : {"local", "other"}) {
      const std::string n = d + "/" + name;
      run("openssl req" + key + " -keyout " + n + ".key -out " + n + ".csr -subj /CN=" + name + quiet);
      run("openssl x509 -req -in " + n + ".csr -CA " + d + "/ca.pem -CAkey " + d + "/ca.key -CAcreateserial -out " + n +
          ".pem -days 2 -extfile " + n + ".ext" + quiet);
    }
  }
  ~test_pki() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
  void run(const std::string& command) {
    if (error.empty() && std::system(command.c_str()) != 0) error = "failed: " + command;
  }
  std::string file(const char* name) const { return (dir / name).string(); }
};

// A one-thread HTTPS server on 127.0.0.1 (port 0) answering every request with 200 and a small JSON
// body, keeping connections alive. Connections are served one after another.
class tls_server {
 public:
  tls_server(const std::string& cert, const std::string& key) : ctx_(ssl::context::tls_server) {
    ctx_.use_certificate_chain_file(cert);
    ctx_.use_private_key_file(key, ssl::context::pem);
    acceptor_.open(tcp::v4());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { serve(); });
  }
  ~tls_server() {
    stopping_ = true;
    // Wakes the blocking accept; the server sees stopping_ and ends.
    beast::error_code ec;
    tcp::socket poke(ioc_);
    poke.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), ec);
    thread_.join();
  }
  std::uint16_t port() const { return port_; }
  int handshakes_completed() const { return handshakes_; }
  int requests_answered() const { return requests_; }

 private:
  void serve() {
    while (!stopping_) {
      beast::error_code ec;
      tcp::socket socket(ioc_);
      acceptor_.accept(socket, ec);
      if (ec || stopping_) continue;
      // A client that stays silent must not hang the test: reads give up after a few seconds.
      timeval tv{5, 0};
      ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      beast::ssl_stream<tcp::socket> stream(std::move(socket), ctx_);
      stream.handshake(ssl::stream_base::server, ec);
      if (ec) continue;  // the client refused our certificate: expected in some tests
      ++handshakes_;
      beast::flat_buffer buffer;
      for (;;) {
        bhttp::request<bhttp::string_body> req;
        bhttp::read(stream, buffer, req, ec);
        if (ec) break;
        bhttp::response<bhttp::string_body> res{bhttp::status::ok, req.version()};
        res.set(bhttp::field::content_type, "application/json");
        res.body() = R"({"ok":true,"target":")" + std::string(req.target()) + "\"}";
        res.keep_alive(true);
        res.prepare_payload();
        ++requests_;  // counted before the answer leaves, so a client that has it sees the count
        bhttp::write(stream, res, ec);
        if (ec) break;
      }
    }
  }

  net::io_context ioc_;
  ssl::context ctx_;
  tcp::acceptor acceptor_{ioc_};
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> handshakes_{0};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

http_request get(const char* target) {
  http_request r;
  r.target = target;
  return r;
}

url_parts tls_url(const char* host, std::uint16_t port) {
  url_parts u;
  u.host = host;
  u.port = port;
  u.tls = true;
  return u;
}

}  // namespace

TEST(HttpClientTls, TrustedCaAnswersAndReusesTheConnection) {
  test_pki pki;
  ASSERT_EQ(pki.error, "") << "the openssl CLI is needed to make the test certificates";
  tls_server server(pki.file("local.pem"), pki.file("local.key"));
  http_client client(pki.file("ca.pem"));

  auto first = client.call(tls_url("127.0.0.1", server.port()), get("/api/v4/version"), transport_limits{});
  ASSERT_TRUE(first) << describe(first.error());
  EXPECT_EQ(first.value().status, 200);
  EXPECT_EQ(first.value().body, R"({"ok":true,"target":"/api/v4/version"})");

  auto again = client.call(tls_url("127.0.0.1", server.port()), get("/again"), transport_limits{});
  ASSERT_TRUE(again) << describe(again.error());
  EXPECT_EQ(again.value().body, R"({"ok":true,"target":"/again"})");
  EXPECT_EQ(client.connections_opened(), 1u);  // the TLS connection was reused
  EXPECT_EQ(server.handshakes_completed(), 1);

  // The test server serves one connection at a time: let go of the idle one before the next.
  client.close_all();
  // The name form of the same server: SNI is sent and the DNS entry of the certificate matches.
  auto by_name = client.call(tls_url("localhost", server.port()), get("/by-name"), transport_limits{});
  ASSERT_TRUE(by_name) << describe(by_name.error());
  EXPECT_EQ(by_name.value().status, 200);
  EXPECT_EQ(client.connections_opened(), 2u);
  EXPECT_EQ(server.requests_answered(), 3);
  client.close_all();
}

TEST(HttpClientTls, UntrustedCaIsANonRetryableProtocolError) {
  test_pki pki;
  ASSERT_EQ(pki.error, "") << "the openssl CLI is needed to make the test certificates";
  tls_server server(pki.file("local.pem"), pki.file("local.key"));
  http_client client;  // system CAs only: the test CA is unknown to them

  auto r = client.call(tls_url("127.0.0.1", server.port()), get("/"), transport_limits{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::protocol);
  EXPECT_FALSE(r.error().retryable);
  EXPECT_NE(r.error().message.find("TLS handshake failed"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("certificate verify failed"), std::string::npos) << r.error().message;
  EXPECT_EQ(server.requests_answered(), 0);
}

TEST(HttpClientTls, CertificateForAnotherHostIsRefused) {
  test_pki pki;
  ASSERT_EQ(pki.error, "") << "the openssl CLI is needed to make the test certificates";
  tls_server server(pki.file("other.pem"), pki.file("other.key"));
  http_client client(pki.file("ca.pem"));  // the chain is trusted; only the name is wrong

  for (const char* host : {"127.0.0.1", "localhost"}) {
    auto r = client.call(tls_url(host, server.port()), get("/"), transport_limits{});
    ASSERT_FALSE(r) << host;
    EXPECT_EQ(r.error().what, call_error::kind::protocol) << host;
    EXPECT_FALSE(r.error().retryable) << host;
    EXPECT_NE(r.error().message.find("certificate verify failed"), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(server.requests_answered(), 0);
}

TEST(HttpClientTls, UnreadableCaFileFailsTheCallWithItsName) {
  http_client client("/nonexistent/changeflow-ca.pem");
  auto r = client.call(tls_url("127.0.0.1", 1), get("/"), transport_limits{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::protocol);
  EXPECT_FALSE(r.error().retryable);
  EXPECT_NE(r.error().message.find("/nonexistent/changeflow-ca.pem"), std::string::npos) << r.error().message;
}

TEST(HttpClientTls, PlainServerOnAnHttpsAddressIsAnErrorValue) {
  // A plain TCP listener that closes at once: the handshake sees the connection end.
  net::io_context ioc;
  tcp::acceptor acceptor(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  std::thread closer([&] {
    beast::error_code ec;
    tcp::socket s(ioc);
    acceptor.accept(s, ec);
  });
  http_client client;
  auto r = client.call(tls_url("127.0.0.1", acceptor.local_endpoint().port()), get("/"), transport_limits{});
  closer.join();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().what, call_error::kind::http_status);
  EXPECT_FALSE(r.error().message.empty());
}
