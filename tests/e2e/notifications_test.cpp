// Notifications end to end: a subscriber on 127.0.0.1 in this process answers 503, then refuses
// connections, then comes back; it must then hold every notified event of several changes, in
// order per change, each signed with its subscription's secret, with no gap against the
// operation_event timeline. Judged on what the subscriber received (every request, refused answers
// included) and on the timeline the service wrote, not on a sample of final state.

#include "base/ids.hpp"
#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"
#include "workflow/status.hpp"

#include <gtest/gtest.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace changeflow::testing;
using json = nlohmann::json;
namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr const char* jwt_secret = "notify-test-secret";

/// One request as the subscriber saw it, and what it answered.
struct received {
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  int answered = 0;
};

/// An HTTP subscriber on 127.0.0.1: accepts on an I/O thread, answers each connection on its own
/// thread (one request, then close), records every request. It can answer 503, stop listening
/// (connections are refused) and listen again on the same port.
class subscriber {
 public:
  subscriber() : acceptor_(io_) {
    listen(0);
    io_thread_ = std::thread([this] {
      auto guard = net::make_work_guard(io_);
      io_.run();
    });
  }
  ~subscriber() {
    on_io([this] { acceptor_.close(); });
    io_.stop();
    io_thread_.join();
    std::lock_guard lock(mutex_);
    for (auto& t : handlers_) t.join();
  }

  unsigned short port() const { return port_; }
  void answer(int status) { status_ = status; }
  /// From now on each delivery's first request is answered 503, its repeats `status`: a subscriber
  /// that comes back flaky. A sender that does not wait for event n before n+1 shows it at once.
  void answer_after_one_refusal(int status) {
    std::lock_guard lock(mutex_);
    refused_once_.clear();
    refuse_first_ = true;
    status_ = status;
  }
  void stop_listening() {
    on_io([this] { acceptor_.close(); });
  }
  void listen_again() {
    on_io([this] { listen(port_); });
  }
  std::vector<received> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void listen(unsigned short port) {
    tcp::endpoint ep(net::ip::make_address("127.0.0.1"), port);
    acceptor_.open(ep.protocol());
    // The service and the simulator are forked from this process: without close-on-exec they would
    // inherit the listening socket and keep it open (connections queued, never refused) while down.
    ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
    acceptor_.set_option(net::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept();
  }
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) return;  // closed: down until listen_again
      std::lock_guard lock(mutex_);
      handlers_.emplace_back([this, s = std::make_shared<tcp::socket>(std::move(socket))] { serve(*s); });
      accept();
    });
  }
  void serve(tcp::socket& socket) {
    timeval tv{5, 0};  // a stuck client cannot hold this thread
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    boost::beast::flat_buffer buffer;
    bhttp::request<bhttp::string_body> req;
    boost::system::error_code ec;
    bhttp::read(socket, buffer, req, ec);
    if (ec) return;
    received r;
    for (const auto& f : req) {
      std::string name(f.name_string());
      for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      r.headers[name] = std::string(f.value());
    }
    r.body = req.body();
    r.answered = status_;
    {
      std::lock_guard lock(mutex_);
      if (refuse_first_ && refused_once_.insert(r.headers["x-changeflow-delivery"]).second) r.answered = 503;
    }
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.answered), 11};
    res.set(bhttp::field::connection, "close");
    res.body() = r.answered == 200 ? "{}" : R"({"message":"subscriber down for maintenance"})";
    res.prepare_payload();
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(std::move(r));
    }
    bhttp::write(socket, res, ec);
    socket.shutdown(tcp::socket::shutdown_both, ec);
  }
  void on_io(std::function<void()> f) {
    std::promise<void> done;
    net::post(io_, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }

  net::io_context io_;
  tcp::acceptor acceptor_;
  std::thread io_thread_;
  unsigned short port_ = 0;
  std::atomic<int> status_{200};
  std::mutex mutex_;
  std::vector<std::thread> handlers_;
  std::vector<received> requests_;
  bool refuse_first_ = false;
  std::set<std::string> refused_once_;
};

json body_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

std::vector<std::pair<std::string, std::string>> as_operator() {
  return {{"Authorization", "Bearer " + mint_hs256(jwt_secret, "alice", 600)}};
}

json deliveries(flow_env& env, const std::string& query = {}) {
  auto r = http_call("127.0.0.1", env.port(), "GET", "/api/v1/ops/notifications?limit=500" + query, {}, as_operator());
  EXPECT_EQ(r.status, 200) << r.body;
  return body_of(r)["data"];
}

/// What the subscriber must hear about a change: the notified events of its timeline, in order
/// (the first event, each phase change, a step change inside a terminal phase), read from the
/// database the service wrote.
std::vector<std::pair<std::string, std::string>> expected_events(flow_env& env, const std::string& operation_id) {
  auto rows =
      env.db().query("SELECT from_phase, to_phase, from_step, to_step FROM operation_event WHERE operation_id = '" +
                     operation_id + "' ORDER BY id");
  const std::set<std::string> terminal = {"VALIDATED", "CREATE_FAILED", "HANDLE_FAILED",
                                          "REJECTED",  "CLOSED",        "CANCELLED"};
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& r : rows) {
    bool first = r[0] == "NULL";
    bool phase_changed = !first && r[0] != r[1];
    bool terminal_step = !first && terminal.count(r[1]) && r[2] != r[3];
    if (first || phase_changed || terminal_step) out.emplace_back(r[1], r[3]);
  }
  return out;
}

}  // namespace

TEST(Notifications, ASubscriberThatWasDownReceivesEveryEventInOrderSigned) {
  subscriber hook;
  hook.answer(503);
  flow_env env(
      {{"auth", {{"jwt_secret", jwt_secret}}},
       {"rate_limit", {{"ops", 100000}}},
       {"notifications",
        {{"dispatch_interval_ms", 100}, {"retry_base_ms", 100}, {"retry_cap_ms", 800}, {"timeout_ms", 2000}}}});
  const std::string url = "http://127.0.0.1:" + std::to_string(hook.port()) + "/changeflow/events";
  const std::string secret = "subscriber-secret-" + changeflow::ids::new_uuid();

  // Anonymous mode (auth.required false): the subscription belongs to "anonymous".
  auto created = http_call("127.0.0.1", env.port(), "POST", "/api/v1/subscriptions",
                           json{{"subject", "alice"}, {"url", url}, {"secret", secret}}.dump(),
                           {{"Content-Type", "application/json"}});
  ASSERT_EQ(created.status, 201) << created.body;
  auto sub = body_of(created)["data"];
  EXPECT_EQ(sub["secret"], secret);
  const auto subscription_id = sub["subscriptionId"].get<std::string>();

  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = env.submit("notify " + std::to_string(i), "alice", "notify-" + std::to_string(i));
    ASSERT_EQ(r.status, 202) << r.body;
    ids.push_back(body_of(r)["data"]["operationId"].get<std::string>());
  }
  // Another subject's change: nobody subscribed to it.
  auto other = env.submit("not subscribed", "bob", "notify-bob");
  ASSERT_EQ(other.status, 202) << other.body;
  const auto other_id = body_of(other)["data"]["operationId"].get<std::string>();

  for (const auto& id : ids) ASSERT_EQ(env.wait_for_phase(id, "VALIDATED")["phase"], "VALIDATED") << id;
  ASSERT_EQ(env.wait_for_phase(other_id, "VALIDATED")["phase"], "VALIDATED");

  // Down, part 1: it answered 503 to the first events, and was tried again.
  ASSERT_TRUE(wait_until([&] { return hook.requests().size() >= 6; }, std::chrono::seconds(30)));
  for (const auto& r : hook.requests()) EXPECT_EQ(r.answered, 503);
  // Down, part 2: nothing listens; the dispatcher's attempts are refused and recorded as such.
  hook.stop_listening();
  const auto answered_while_up = hook.requests().size();
  ASSERT_TRUE(wait_until(
      [&] {
        const auto pending = deliveries(env, "&state=PENDING");
        for (const auto& d : pending["items"]) {
          if (d["lastError"].is_string() && d["lastError"].get<std::string>().find("refused") != std::string::npos) {
            return true;
          }
        }
        return false;
      },
      std::chrono::seconds(30)))
      << deliveries(env).dump(2);
  auto pending = deliveries(env);
  EXPECT_EQ(pending["counts"]["DELIVERED"], 0) << pending.dump(2);
  EXPECT_GT(pending["counts"]["PENDING"], 0) << pending.dump(2);

  // Back, though flaky at first: every delivery is refused once more, then accepted.
  hook.answer_after_one_refusal(200);
  hook.listen_again();
  std::size_t expected_total = 0;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> expected;
  for (const auto& id : ids) {
    expected[id] = expected_events(env, id);
    expected_total += expected[id].size();
  }
  ASSERT_GE(expected_total, ids.size() * 5) << "created, approval, MR, merge, validated at least";
  ASSERT_TRUE(wait_until(
      [&] {
        auto c = deliveries(env)["counts"];
        return c["DELIVERED"] == expected_total && c["PENDING"] == 0;
      },
      std::chrono::seconds(120)))
      << deliveries(env).dump(2);
  EXPECT_EQ(deliveries(env)["counts"]["FAILED"], 0);

  auto all = hook.requests();
  EXPECT_GT(all.size(), answered_while_up);
  // Every request, refused or not, is signed with the subscription's secret over timestamp + body.
  std::map<std::string, std::vector<json>> accepted_by_change;  // first 2xx of each delivery, in arrival order
  std::set<std::string> accepted_ids;
  for (const auto& r : all) {
    ASSERT_EQ(r.headers.count("x-changeflow-signature"), 1u);
    const auto ts = r.headers.at("x-changeflow-timestamp");
    EXPECT_EQ(r.headers.at("x-changeflow-signature"), "sha256=" + changeflow::ids::hmac_sha256_hex(secret, ts + r.body))
        << r.body;
    auto body = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(body.is_discarded());
    EXPECT_EQ(r.headers.at("x-changeflow-delivery"), body["deliveryId"]);
    EXPECT_EQ(r.headers.at("x-changeflow-event"), body["kind"]);
    EXPECT_EQ(body["subscriptionId"], subscription_id);
    EXPECT_NE(body["operationId"], other_id) << "an unsubscribed subject's change was sent";
    if (r.answered == 200 && accepted_ids.insert(body["deliveryId"].get<std::string>()).second) {
      accepted_by_change[body["operationId"].get<std::string>()].push_back(body);
    }
  }
  // Per change: sequences 1..n in arrival order, each the timeline's n-th notified event, the
  // status document of the change attached.
  for (const auto& id : ids) {
    const auto& got = accepted_by_change[id];
    const auto& want = expected[id];
    ASSERT_EQ(got.size(), want.size()) << id;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i]["sequence"], i + 1) << id << " arrived out of order or with a gap";
      EXPECT_EQ(got[i]["event"]["toPhase"], want[i].first) << id << " #" << i + 1;
      auto step = changeflow::workflow::step_from_code(std::stoi(want[i].second));
      ASSERT_TRUE(step.has_value()) << want[i].second;
      EXPECT_EQ(got[i]["event"]["to"], changeflow::workflow::to_string(*step)) << id << " #" << i + 1;
    }
    EXPECT_EQ(got.front()["kind"], "change.created");
    EXPECT_EQ(got.back()["kind"], "change.terminal");
    EXPECT_EQ(got.back()["change"]["operationId"], id);
    EXPECT_EQ(got.back()["change"]["phase"], "VALIDATED");
    EXPECT_TRUE(got.back()["change"]["timeline"].is_array());
  }
}
