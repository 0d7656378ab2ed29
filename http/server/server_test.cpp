#include "http/server/server.hpp"

#include "tests/support/http_client.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <stdexcept>
#include <thread>

using namespace changeflow;
using changeflow::testing::http_call;

namespace {
http_server::server_options small_server() {
  http_server::server_options o;
  o.port = 0;
  o.body_limit = 1024;
  o.header_limit = 2048;
  o.read_timeout = std::chrono::milliseconds(300);
  return o;
}

void echo(http_server::request&& req, http_server::responder reply) {
  http_server::response r;
  r.content_type = "text/plain";
  r.body = req.method + " " + req.path + " q=" + req.query_param("q").value_or("-") + " body=" + req.body +
           " peer=" + req.peer_address;
  reply(std::move(r));
}
}  // namespace

TEST(HttpServer, ServesRequestsAndDecodesPathAndQuery) {
  http_server::server s(small_server(), echo);
  s.start();
  auto r = http_call("127.0.0.1", s.port(), "POST", "/a%20b?q=x%2By+z", "hello");
  EXPECT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.body, "POST /a b q=x+y z body=hello peer=127.0.0.1");
  s.stop();
}

// listen() binds without serving: a process binds first and fails there, before it starts what it
// would have to stop again; a connection made meanwhile waits in the backlog and is served by start().
TEST(HttpServer, ListenBindsFirstAndStartServesWhatWaited) {
  http_server::server s(small_server(), echo);
  s.listen();
  ASSERT_NE(s.port(), 0);
  // Connected and sent before start(): the kernel holds the connection in the listen backlog.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(s.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << "listen() must accept connections";
  const std::string request = "GET /early HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  s.start();
  std::string answer;
  char buf[1024];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) break;  // nothing within 10 s: the assertions below fail
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("GET /early"), std::string::npos) << answer;
  s.stop();
}

TEST(HttpServer, ListenOnATakenAddressThrowsAndCanBeTriedAgain) {
  auto first = std::make_unique<http_server::server>(small_server(), echo);
  first->start();
  auto taken = small_server();
  taken.port = first->port();
  http_server::server second(taken, echo);
  EXPECT_THROW(second.listen(), std::runtime_error);
  EXPECT_THROW(second.start(), std::runtime_error) << "a failed listen must not leave a half-open acceptor behind";
  first.reset();  // stops and closes the first server's listener
  second.start();
  auto r = http_call("127.0.0.1", second.port(), "GET", "/again");
  EXPECT_EQ(r.status, 200) << r.error;
  second.stop();
}

TEST(HttpServer, RepliesFromAnotherThread) {
  http_server::server s(small_server(), [](http_server::request&&, http_server::responder reply) {
    std::thread([reply] {
      http_server::response r;
      r.status = 202;
      r.body = "{}";
      reply(std::move(r));
    }).detach();
  });
  s.start();
  auto r = http_call("127.0.0.1", s.port(), "GET", "/");
  EXPECT_EQ(r.status, 202);
  s.stop();
}

// Each I/O thread runs a context of its own and connections are dealt to them in turn at accept:
// a connection is served by one thread for its whole life, and consecutive connections by
// different threads.
TEST(HttpServer, ConnectionsAreDealtToTheIoThreadsInTurn) {
  auto o = small_server();
  o.threads = 2;
  std::mutex mu;
  std::vector<std::thread::id> served_by;
  http_server::server s(o, [&](http_server::request&&, http_server::responder reply) {
    {
      std::lock_guard lock(mu);
      served_by.push_back(std::this_thread::get_id());
    }
    http_server::response r;
    r.body = "{}";
    reply(std::move(r));
  });
  s.start();
  for (int i = 0; i < 4; ++i) {
    auto r = http_call("127.0.0.1", s.port(), "GET", "/");  // a connection each
    ASSERT_EQ(r.status, 200) << r.error;
  }
  s.stop();
  ASSERT_EQ(served_by.size(), 4u);
  EXPECT_NE(served_by[0], served_by[1]);
  EXPECT_EQ(served_by[0], served_by[2]);
  EXPECT_EQ(served_by[1], served_by[3]);
}

TEST(HttpServer, ForgottenReplyBecomes500) {
  http_server::server s(small_server(), [](http_server::request&&, http_server::responder) {});
  s.start();
  auto r = http_call("127.0.0.1", s.port(), "GET", "/");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body.find("what"), std::string::npos);
  s.stop();
}

TEST(HttpServer, ThrowingHandlerLeaksNothing) {
  http_server::server s(small_server(), [](http_server::request&&, http_server::responder) {
    throw std::runtime_error("secret internal detail");
  });
  s.start();
  auto r = http_call("127.0.0.1", s.port(), "GET", "/");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body.find("secret"), std::string::npos);
  s.stop();
}

TEST(HttpServer, OversizedBodyIs413) {
  http_server::server s(small_server(), echo);
  s.start();
  auto r = http_call("127.0.0.1", s.port(), "POST", "/", std::string(5000, 'x'));
  EXPECT_EQ(r.status, 413);
  s.stop();
}

TEST(HttpServer, OversizedHeadersAre431) {
  http_server::server s(small_server(), echo);
  s.start();
  auto r = http_call("127.0.0.1", s.port(), "GET", "/", "", {{"X-Big", std::string(4000, 'a')}});
  EXPECT_EQ(r.status, 431);
  s.stop();
}

TEST(HttpServer, SlowHeaderClientIsDisconnected) {
  http_server::server s(small_server(), echo);
  s.start();
  // Sends an incomplete header block and waits; the server must close after its read timeout.
  auto got = changeflow::testing::raw_exchange("127.0.0.1", s.port(), "GET / HTTP/1.1\r\nHost: x\r\n",
                                               std::chrono::milliseconds(3000));
  EXPECT_TRUE(got.empty());
  // Beast closes the socket before the handler counts the timeout: wait for the count.
  EXPECT_TRUE(changeflow::testing::wait_until([&] { return s.stats().timeouts >= 1; }, std::chrono::seconds(5)));
  s.stop();
}

TEST(HttpServer, GarbageIs400) {
  http_server::server s(small_server(), echo);
  s.start();
  auto got = changeflow::testing::raw_exchange("127.0.0.1", s.port(), "NOT HTTP AT ALL\r\n\r\n");
  EXPECT_NE(got.find("400"), std::string::npos) << got;
  s.stop();
}

TEST(HttpServer, StopIsIdempotent) {
  http_server::server s(small_server(), echo);
  s.start();
  s.stop();
  s.stop();
  auto r = http_call("127.0.0.1", s.port(), "GET", "/", "", {}, std::chrono::milliseconds(500));
  EXPECT_EQ(r.status, 0);
}

// A handler that never answers: past handler_timeout the client gets a 503 and the connection is
// closed; the handler's late reply is dropped.
TEST(HttpServer, AHandlerThatNeverAnswersGetsItsConnectionClosed) {
  auto o = small_server();
  o.handler_timeout = std::chrono::milliseconds(200);
  std::mutex mu;
  std::vector<http_server::responder> held;
  http_server::server s(o, [&](http_server::request&&, http_server::responder reply) {
    std::lock_guard lock(mu);
    held.push_back(std::move(reply));  // kept, never called while the client waits
  });
  s.start();
  auto r = http_call("127.0.0.1", s.port(), "GET", "/");
  EXPECT_EQ(r.status, 503) << r.error;
  EXPECT_NE(r.body.find("HANDLER_TIMEOUT"), std::string::npos) << r.body;
  EXPECT_EQ(r.header("connection"), "close");
  EXPECT_GE(s.stats().timeouts, 1u);
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(held.size(), 1u);
    http_server::response late;
    late.status = 200;
    held.front()(std::move(late));  // after the timeout: must not write into a closed connection
  }
  // The server still serves new connections.
  auto again = http_call("127.0.0.1", s.port(), "GET", "/");
  EXPECT_EQ(again.status, 503);
  s.stop();
}
