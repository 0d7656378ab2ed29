#pragma once
// HTTP/1.1 server on Boost.Beast. Sessions do I/O only: each connection runs on one I/O thread's
// event loop (an io_context run by that thread alone), every read has a deadline, bodies and header
// blocks are bounded, and one request is handled at a time per connection (pipelined requests wait
// in the socket buffer). The handler may reply from any thread; the reply is posted back to the
// connection's event loop.

#include "http/server/message.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace changeflow::http_server {

struct server_options {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;  // 0 = any free port
  int threads = 2;
  std::uint64_t body_limit = 1 << 20;
  std::uint32_t header_limit = 16 * 1024;
  std::chrono::milliseconds read_timeout{10000};
  std::chrono::milliseconds handler_timeout{
      30000};  // past it: 503 HANDLER_TIMEOUT, connection closed, late reply dropped
  std::string server_name = "changeflow";
};

struct server_stats {
  std::uint64_t connections_open = 0;
  std::uint64_t requests = 0;
  std::uint64_t rejected_too_large = 0;
  std::uint64_t timeouts = 0;
};

class server {
 public:
  server(server_options options, handler h);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Binds the address and listens (connections wait in the backlog until start); throws
  /// std::runtime_error when the address cannot be bound. A process calls it before it starts
  /// anything a failed start would have to undo. Does nothing once bound.
  void listen();
  /// Binds (unless listen did) and starts accepting on the I/O threads; throws std::runtime_error
  /// when the address cannot be bound.
  void start();
  /// Stops accepting, closes connections and joins the threads. Safe to call twice.
  void stop();
  /// Stops accepting new connections but keeps serving open ones.
  void stop_accepting();
  std::uint16_t port() const;
  server_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace changeflow::http_server
