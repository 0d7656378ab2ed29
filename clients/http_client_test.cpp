#include "clients/http_client.hpp"
#include "clients/request_message.hpp"

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
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

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

// A plain HTTP server on 127.0.0.1 that answers each request it reads with the next scripted
// answer: the answer's pieces are written one by one (a pause between them, as a network that
// delivers a response in parts), and the connection is closed after it when the script says so.
// Connections are served one after another on one thread; a request is read up to its blank line
// (the client's requests here carry no body).
struct scripted_answer {
  std::vector<std::string> pieces;
  bool close_after = false;
  bool never_answer = false;  // read the request, then hold the connection open without answering
};

class scripted_server {
 public:
  explicit scripted_server(std::vector<scripted_answer> script)
      : script_(std::move(script)), acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { serve(); });
  }
  ~scripted_server() {
    stopping_ = true;
    boost::system::error_code ec;
    acceptor_.close(ec);
    {
      std::lock_guard lock(mu_);
      for (auto* s : open_) s->close(ec);
    }
    if (thread_.joinable()) thread_.join();
  }
  std::uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }

 private:
  void serve() {
    std::size_t next = 0;
    while (!stopping_ && next < script_.size()) {
      boost::asio::ip::tcp::socket socket(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec) return;
      ++connections_;
      {
        std::lock_guard lock(mu_);
        open_.push_back(&socket);
      }
      socket.set_option(boost::asio::ip::tcp::no_delay(true), ec);
      std::string in;
      while (next < script_.size()) {
        char buf[4096];
        while (in.find("\r\n\r\n") == std::string::npos) {
          std::size_t n = socket.read_some(boost::asio::buffer(buf), ec);
          if (ec) break;
          in.append(buf, n);
        }
        if (ec) break;
        in.erase(0, in.find("\r\n\r\n") + 4);
        const auto& answer = script_[next++];
        if (answer.never_answer) {
          socket.read_some(boost::asio::buffer(buf), ec);  // until the client gives up and closes
          break;
        }
        for (std::size_t i = 0; i < answer.pieces.size() && !ec; ++i) {
          if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          boost::asio::write(socket, boost::asio::buffer(answer.pieces[i]), ec);
        }
        if (answer.close_after || ec) break;
      }
      {
        std::lock_guard lock(mu_);
        open_.clear();
      }
      socket.close(ec);
    }
  }

  std::vector<scripted_answer> script_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  std::mutex mu_;
  std::vector<boost::asio::ip::tcp::socket*> open_;
};

std::string ok_head(std::size_t length) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(length) + "\r\n\r\n";
}

http_request get(const std::string& target) {
  http_request r;
  r.target = target;
  return r;
}

}  // namespace

TEST(HttpClientPlain, AnswersInPiecesAreReadWholeAndTheConnectionIsReused) {
  const std::string body = R"({"iid":7,"title":")" + std::string(3000, 'x') + R"("})";
  const std::string head = ok_head(body.size());
  std::vector<scripted_answer> script;
  for (int i = 0; i < 3; ++i) {
    // The header block itself split, then the body in two parts.
    script.push_back({{head.substr(0, 20), head.substr(20) + body.substr(0, 100), body.substr(100)}, false, false});
  }
  scripted_server server(std::move(script));
  http_client client;
  for (int i = 0; i < 3; ++i) {
    auto r = client.call(url_parts{"127.0.0.1", server.port(), ""}, get("/mr/" + std::to_string(i)), {});
    ASSERT_TRUE(r) << describe(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, body);
    EXPECT_EQ(r->header("content-type"), "application/json");
  }
  EXPECT_EQ(client.connections_opened(), 1u);
  EXPECT_EQ(server.connections(), 1);
}

TEST(HttpClientPlain, AnAnswerThatEndsWithTheConnectionIsReadToItsEnd) {
  scripted_server server({{{"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", R"({"done":)", "true}"}, true, false},
                          {{ok_head(2), "{}"}, false, false}});
  http_client client;
  auto first = client.call(url_parts{"127.0.0.1", server.port(), ""}, get("/a"), {});
  ASSERT_TRUE(first) << describe(first.error());
  EXPECT_EQ(first->body, R"({"done":true})");
  auto second = client.call(url_parts{"127.0.0.1", server.port(), ""}, get("/b"), {});
  ASSERT_TRUE(second) << describe(second.error());
  EXPECT_EQ(second->body, "{}");
  EXPECT_EQ(client.connections_opened(), 2u);  // the first connection ended with its answer
}

TEST(HttpClientPlain, AConnectionClosedInTheBodyIsARetryableReset) {
  scripted_server server({{{ok_head(100), R"({"partial":)"}, true, false}});
  http_client client;
  auto r = client.call(url_parts{"127.0.0.1", server.port(), ""}, get("/a"), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::reset) << describe(r.error());
  EXPECT_TRUE(r.error().retryable);
}

TEST(HttpClientPlain, AServerThatNeverAnswersIsARetryableTimeout) {
  scripted_server server({{{}, false, true}});
  http_client client;
  transport_limits limits;
  limits.request_timeout = std::chrono::milliseconds(300);
  auto r = client.call(url_parts{"127.0.0.1", server.port(), ""}, get("/a"), limits);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::timeout) << describe(r.error());
  EXPECT_TRUE(r.error().retryable);
}

TEST(HttpClientPlain, AnAnswerOverTheLimitIsAProtocolError) {
  const std::string body(5000, 'x');
  scripted_server server({{{ok_head(body.size()) + body}, false, false}});
  http_client client;
  transport_limits limits;
  limits.max_response_bytes = 1000;
  auto r = client.call(url_parts{"127.0.0.1", server.port(), ""}, get("/a"), limits);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::protocol);
  EXPECT_EQ(r.error().message, "response too large");
  EXPECT_FALSE(r.error().retryable);
}

TEST(HttpClientPlain, TheAnswerToAHeadHasNoBodyAndTheConnectionIsReused) {
  // The header names the length of the body a GET would get; a HEAD's answer stops at the header.
  scripted_server server({{{ok_head(42)}, false, false}, {{ok_head(2), "{}"}, false, false}});
  http_client client;
  transport_limits limits;
  limits.request_timeout = std::chrono::milliseconds(5000);
  http_request head = get("/a");
  head.method = "HEAD";
  auto first = client.call(url_parts{"127.0.0.1", server.port(), ""}, head, limits);
  ASSERT_TRUE(first) << describe(first.error());
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "");
  EXPECT_EQ(first->header("content-length"), "42");
  auto second = client.call(url_parts{"127.0.0.1", server.port(), ""}, get("/b"), limits);
  ASSERT_TRUE(second) << describe(second.error());
  EXPECT_EQ(second->body, "{}");
  EXPECT_EQ(client.connections_opened(), 1u);
}

TEST(HttpClientPlain, BytesAfterTheAnswerKeepTheConnectionFromBeingReused) {
  scripted_server server(
      {{{ok_head(2) + "{}" + "HTTP/1.1 200 OK\r\n"}, false, false}, {{ok_head(2), "{}"}, false, false}});
  http_client client;
  auto first = client.call(url_parts{"127.0.0.1", server.port(), ""}, get("/a"), {});
  ASSERT_TRUE(first) << describe(first.error());
  EXPECT_EQ(first->body, "{}");
  // The scripted server serves one connection at a time: the second call can only be answered
  // after the client dropped the first connection and opened another.
  auto second = client.call(url_parts{"127.0.0.1", server.port(), ""}, get("/b"), {});
  ASSERT_TRUE(second) << describe(second.error());
  EXPECT_EQ(client.connections_opened(), 2u);
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
        // A target under /chunked is answered with chunked transfer encoding (as a proxy may answer).
        if (req.target().starts_with("/chunked")) {
          res.chunked(true);
        } else {
          res.prepare_payload();
        }
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

/// A test CA, an HTTPS server with its certificate and a client that trusts the CA.
class HttpClientTlsReads : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pki.error, "") << "the openssl CLI is needed to make the test certificates";
    server.emplace(pki.file("local.pem"), pki.file("local.key"));
    client.emplace(pki.file("ca.pem"));
  }
  void TearDown() override {
    if (client) client->close_all();
  }
  result<http_response> call(const std::string& target, const transport_limits& limits) {
    return client->call(tls_url("127.0.0.1", server->port()), get(target.c_str()), limits);
  }
  test_pki pki;
  std::optional<tls_server> server;
  std::optional<http_client> client;
};

TEST_F(HttpClientTlsReads, AnAnswerOverTheLimitIsAProtocolErrorAndTheNextCallWorks) {
  // The server echoes the target in its body: a 5,000-character target makes a body over the
  // limit, written with its header in one TLS record, so header and body arrive together.
  const std::string long_target = "/" + std::string(5000, 'x');
  transport_limits limits;
  limits.max_response_bytes = 1000;
  auto r = call(long_target, limits);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().what, call_error::kind::protocol) << describe(r.error());
  EXPECT_EQ(r.error().message, "response too large");
  EXPECT_FALSE(r.error().retryable);
  // The connection that carried the refused answer is not reused; a call within the limit works.
  auto next = call("/small", limits);
  ASSERT_TRUE(next) << describe(next.error());
  EXPECT_EQ(next.value().body, R"({"ok":true,"target":"/small"})");
  // The same limit holds for a chunked body, whose length no header announces.
  auto chunked = call("/chunked/" + std::string(5000, 'x'), limits);
  ASSERT_FALSE(chunked);
  EXPECT_EQ(chunked.error().message, "response too large") << describe(chunked.error());
}

TEST_F(HttpClientTlsReads, AChunkedAnswerIsReadWholeAndTheConnectionIsReused) {
  const std::string target = "/chunked/" + std::string(3000, 'y');
  for (int i = 0; i < 2; ++i) {
    auto r = call(target, transport_limits{});
    ASSERT_TRUE(r) << describe(r.error());
    EXPECT_EQ(r.value().body, R"({"ok":true,"target":")" + target + "\"}");
  }
  EXPECT_EQ(client->connections_opened(), 1u);
}

// The plain path writes a request by hand; it must be the bytes Beast's serializer writes for the
// message the TLS path builds (same fields, same order, same length rules).
TEST(RequestText, IsWhatBeastWritesForTheSameRequest) {
  auto beast_text = [](const http_request& req, const std::string& host_port) {
    std::ostringstream out;
    out << request_message(req, host_port);
    return out.str();
  };
  std::vector<http_request> cases;
  for (const char* method : {"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"}) {
    for (std::string body : {std::string(), std::string(R"({"a":1})")}) {
      http_request r;
      r.method = method;
      r.target = "/api/v4/projects/team%2Frepo/merge_requests/7?x=1";
      r.body = body;
      cases.push_back(r);
    }
  }
  http_request with_headers;
  with_headers.method = "PUT";
  with_headers.target = "/approve";
  with_headers.body = "{}";
  with_headers.headers = {
      {"PRIVATE-TOKEN", "t-1"}, {"accept", "text/plain"}, {"Idempotency-Key", "k"}, {"Private-Token", "t-2"}};
  cases.push_back(with_headers);
  for (const auto& req : cases) {
    SCOPED_TRACE(req.method + " body " + std::to_string(req.body.size()));
    EXPECT_EQ(request_text(req, "127.0.0.1:8080"), beast_text(req, "127.0.0.1:8080"));
  }
}

TEST(RequestText, NoHeaderCanBeInjectedAndLengthIsTheClients) {
  http_request r;
  r.method = "POST";
  r.target = "/x";
  r.body = "abc";
  r.headers = {{"X-Note", "a\r\nX-Injected: 1"}, {"Content-Length", "999"}, {"Connection", "close"}};
  auto text = request_text(r, "h:1");
  EXPECT_EQ(text.find("\r\nX-Injected"), std::string::npos) << text;
  EXPECT_NE(text.find("X-Note: aX-Injected: 1\r\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Content-Length: 3\r\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("999"), std::string::npos) << text;
  EXPECT_EQ(text.find("Connection"), std::string::npos) << text;
}

TEST(RequestText, AMethodOrTargetThatCannotBeWrittenIsRefusedBeforeAnyConnection) {
  http_client client;
  auto server = parse_url("http://127.0.0.1:1");  // nothing listens: a refusal would say "refused"
  ASSERT_TRUE(server);
  transport_limits limits;
  for (auto [method, target] :
       {std::pair<const char*, const char*>{"GET", "/a b"}, {"GET", "/a\r\nX: 1"}, {"FETCH", "/a"}}) {
    http_request r;
    r.method = method;
    r.target = target;
    auto answer = client.call(*server, r, limits);
    ASSERT_FALSE(answer) << method << " " << target;
    EXPECT_EQ(answer.error().what, call_error::kind::invalid_argument) << method << " " << target;
  }
}
