#include "http/server/server.hpp"

#include "base/log.hpp"
#include "base/worker_pool.hpp"
#include "http/server/beast_request.hpp"
#include "http/server/response_text.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace changeflow::http_server {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

struct counters {
  std::atomic<std::uint64_t> open{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> too_large{0};
  std::atomic<std::uint64_t> timeouts{0};
};

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket&& socket, const server_options& opts, const handler& h, counters& c)
      : stream_(std::move(socket)), opts_(opts), handler_(h), counters_(c) {
    ++counters_.open;
    // The peer of a connection does not change: asked once, not once per request (a system call).
    beast::error_code peer_ec;
    auto ep = stream_.socket().remote_endpoint(peer_ec);
    if (!peer_ec) peer_address_ = ep.address().to_string();
  }
  ~session() { --counters_.open; }

  void run() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&session::do_read, shared_from_this()));
  }

 private:
  void do_read() {
    parser_.emplace();
    parser_->body_limit(opts_.body_limit);
    parser_->header_limit(opts_.header_limit);
    stream_.expires_after(opts_.read_timeout);
    bhttp::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec == bhttp::error::end_of_stream || ec == net::error::connection_reset) return do_close();
    if (ec == beast::error::timeout) {
      ++counters_.timeouts;
      return do_close();
    }
    if (ec == bhttp::error::body_limit) {
      ++counters_.too_large;
      return send_error(413, "PAYLOAD_TOO_LARGE", "Request body too large");
    }
    if (ec == bhttp::error::header_limit) {
      ++counters_.too_large;
      return send_error(431, "HEADERS_TOO_LARGE", "Request header fields too large");
    }
    if (ec) return send_error(400, "BAD_REQUEST", "Malformed HTTP request");

    ++counters_.requests;
    auto& msg = parser_->get();
    request req = to_request(msg);  // beast_request.hpp (shared with fuzz/fuzz_http_request)
    req.peer_address = peer_address_;
    req.keep_alive = msg.keep_alive();
    keep_alive_ = req.keep_alive;
    version_ = msg.version();

    // The handler may answer from another thread; post the reply back onto this connection's event
    // loop (its io_context, run by exactly one thread, which is what serialises the connection). No
    // stream operation is pending while the handler runs (a stream's expiry only cuts pending
    // operations), so the handler's deadline is a timer of its own: past it, the client gets a 503
    // and the connection is closed; the handler's late reply is dropped.
    auto self = shared_from_this();
    const auto generation = ++generation_;
    const auto read_at = std::chrono::steady_clock::now();
    awaiting_reply_ = true;
    // A reply made on the loop's own thread (a handler that answers at once, e.g. a status read
    // from memory) is written inline; one from another thread is queued onto the loop, so it cannot
    // run before this function returns.
    responder reply([self, generation](response r) {
      net::dispatch(self->stream_.get_executor(), [self, generation, r = std::move(r)]() mutable {
        if (!self->awaiting_reply_ || generation != self->generation_) return;  // answered by the timeout
        if (self->deadline_armed_) self->handler_timer_.cancel();
        self->deadline_armed_ = false;
        self->do_write(std::move(r));
      });
    });
    try {
      handler_(std::move(req), reply);
    } catch (const std::exception& e) {
      log::error("http.handler_threw", {{"what", e.what()}});
      reply(internal_error());
    } catch (...) {
      reply(internal_error());
    }
    // The handler's deadline is armed only for a reply still to come: most requests are answered
    // inline, and a timer armed and cancelled per request is two trips through the reactor's timer
    // queue (and often a timerfd update) for nothing.
    if (awaiting_reply_ && generation == generation_) arm_deadline(generation, read_at);
  }

  /// The deadline counts from the request's arrival (`read_at`), as if armed before the handler ran.
  void arm_deadline(std::uint64_t generation, std::chrono::steady_clock::time_point read_at) {
    deadline_armed_ = true;
    handler_timer_.expires_at(read_at + opts_.handler_timeout);
    handler_timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
      if (ec || !self->awaiting_reply_ || generation != self->generation_) return;
      self->deadline_armed_ = false;
      ++self->counters_.timeouts;
      log::warn("http.handler_timeout",
                {{"timeout_ms", static_cast<std::int64_t>(self->opts_.handler_timeout.count())}});
      self->send_error(503, "HANDLER_TIMEOUT",
                       "The request took too long to handle; its outcome is unknown, retry with "
                       "the same Idempotency-Key");
    });
  }

  static response internal_error() {
    response r;
    r.status = 500;
    r.body = R"({"code":"INTERNAL_ERROR","message":"Internal error","data":null})";
    return r;
  }

  void send_error(unsigned status, const char* code, const char* message) {
    keep_alive_ = false;
    awaiting_reply_ = false;
    response r;
    r.status = status;
    r.body = std::string(R"({"code":")") + code + R"(","message":")" + message + R"(","data":null})";
    do_write(std::move(r));
  }

  void do_write(response r) {
    awaiting_reply_ = false;
    // Status 0 closes the connection without answering: the simulator's "response lost" fault.
    if (r.status == 0) return do_close();
    // One write per connection is in flight at a time, so the connection's buffer carries it.
    serialize_response(r, version_ ? version_ : 11, keep_alive_, opts_.server_name, out_);
    stream_.expires_after(opts_.read_timeout);
    net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_write(ec, !self->keep_alive_);
    });
  }

  void on_write(beast::error_code ec, bool close) {
    // A large reply (a console asset, a long list) does not stay held by an idle keep-alive
    // connection: its buffer is let go; a small one's is reused by the next reply.
    if (out_.capacity() > 64 * 1024) std::string().swap(out_);
    if (ec) return do_close();
    if (close || !keep_alive_) return do_close();
    do_read();
  }

  void do_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::string out_;  // the reply being written
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  const server_options& opts_;
  const handler& handler_;
  counters& counters_;
  std::string peer_address_;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  // The handler's deadline, and which request's reply is awaited (a late reply of an earlier
  // request must not answer a later one).
  net::steady_timer handler_timer_{stream_.get_executor()};
  bool awaiting_reply_ = false;
  bool deadline_armed_ = false;
  std::uint64_t generation_ = 0;
};

}  // namespace

struct server::impl {
  // Declaration order is destruction order reversed: destroying the contexts destroys the handlers
  // still queued on them, and with them the last sessions, which use opts, h and stats.
  server_options opts;
  handler h;
  counters stats;
  // One io_context per I/O thread, each connection on one of them (round robin at accept). With
  // one context shared by all threads, every completion the reactor thread queued woke another
  // thread (a futex wake-up and a context switch per request on a loaded server); a connection
  // that stays on its thread's context is served without any hand-off between I/O threads.
  std::vector<std::unique_ptr<net::io_context>> contexts;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> keep_running;
  std::optional<tcp::acceptor> acceptor;
  std::size_t next_context = 0;
  std::vector<std::thread> threads;
  std::atomic<bool> accepting{false};
  std::uint16_t bound_port = 0;
  std::mutex stop_mutex;
  bool stopped = false;

  // The cancelled accept still queued on the first context holds a socket of the
  // context it was meant for: the first context goes first, the others after it, whatever order a
  // vector's elements are destroyed in.
  ~impl() {
    keep_running.clear();
    acceptor.reset();
    for (auto& context : contexts) context.reset();
  }

  impl(int thread_count) {
    const int n = std::max(1, thread_count);
    for (int t = 0; t < n; ++t) {
      contexts.push_back(std::make_unique<net::io_context>(1));
      keep_running.push_back(net::make_work_guard(*contexts.back()));
    }
    acceptor.emplace(contexts.front()->get_executor());
  }

  void do_accept() {
    auto& target = *contexts[next_context];
    next_context = (next_context + 1) % contexts.size();
    acceptor->async_accept(target.get_executor(), [this](beast::error_code ec, tcp::socket socket) {
      if (!accepting.load()) return;
      if (!ec) {
        std::make_shared<session>(std::move(socket), opts, h, stats)->run();
      }
      do_accept();
    });
  }
};

server::server(server_options options, handler h) : impl_(std::make_unique<impl>(options.threads)) {
  impl_->opts = std::move(options);
  impl_->h = std::move(h);
}

server::~server() {
  stop();
}

void server::listen() {
  auto& i = *impl_;
  if (i.acceptor->is_open()) return;
  beast::error_code ec;
  auto address = net::ip::make_address(i.opts.address, ec);
  if (ec) throw std::runtime_error("invalid listen address '" + i.opts.address + "'");
  tcp::endpoint ep{address, i.opts.port};
  i.acceptor->open(ep.protocol(), ec);
  if (!ec) i.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) i.acceptor->bind(ep, ec);
  if (!ec) i.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    i.acceptor->close(ignored);  // a later listen() tries again from the start
    throw std::runtime_error("cannot listen on " + i.opts.address + ":" + std::to_string(i.opts.port) + ": " +
                             ec.message());
  }
  i.bound_port = i.acceptor->local_endpoint().port();
}

void server::start() {
  auto& i = *impl_;
  listen();
  i.accepting = true;
  i.do_accept();
  for (auto& context : i.contexts) {
    i.threads.emplace_back([&context] {
      name_this_thread("http");
      context->run();
    });
  }
}

void server::stop_accepting() {
  auto& i = *impl_;
  if (!i.accepting.exchange(false)) return;
  net::post(i.acceptor->get_executor(), [&i] {
    beast::error_code ec;
    i.acceptor->close(ec);
  });
}

void server::stop() {
  auto& i = *impl_;
  std::lock_guard lock(i.stop_mutex);
  if (i.stopped) return;
  i.stopped = true;
  stop_accepting();
  for (auto& context : i.contexts) context->stop();
  for (auto& t : i.threads) {
    if (t.joinable()) t.join();
  }
  i.threads.clear();
  // The posted close may not have run before the loop stopped: close the port here, synchronously.
  beast::error_code ec;
  i.acceptor->close(ec);
  // No request reaches the handler any more: release it (and whatever it owns, e.g. timer threads
  // that could call back into the application) now, while the application still exists. Sessions
  // still held by pending responders keep only the counters and the io_context, owned by `impl`.
  i.h = nullptr;
}

std::uint16_t server::port() const {
  return impl_->bound_port;
}

server_stats server::stats() const {
  return {impl_->stats.open.load(), impl_->stats.requests.load(), impl_->stats.too_large.load(),
          impl_->stats.timeouts.load()};
}

}  // namespace changeflow::http_server
