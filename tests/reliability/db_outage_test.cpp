// The database goes away under load and comes back. changeflowd runs against a PRIVATE
// MariaDB (stopping the shared test server would disturb every other test), changes are submitted
// continuously, the server is stopped for CHANGEFLOW_DB_OUTAGE_SECONDS (default 8; the long run
// uses 30) and started again. Asserted:
//   - the service never crashes (the same process answers from start to end);
//   - during the outage submits and status reads fail fast with a clear 503 (UNAVAILABLE), never
//     a hang or a 500, and /healthz keeps answering 200;
//   - afterwards every accepted change reaches VALIDATED: actors retried their transitions and the
//     callbacks refused during the outage were delivered again;
//   - no side effect happened twice (one merge per MR, one approval per bot per MR, one
//     MERGED -> VALIDATED flip per operation).

#include "tests/support/flow_env.hpp"
#include "tests/support/sim_attempts.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

int outage_seconds() {
  const char* s = std::getenv("CHANGEFLOW_DB_OUTAGE_SECONDS");
  return s ? std::max(1, std::atoi(s)) : 8;
}

/// A MariaDB server of this test alone (scripts/db), stopped and started on demand.
class private_db {
 public:
  private_db() : dir_(make_temp_dir("cf-outage")), port_(free_port()) {
    script_ = source_dir() + "/scripts/db";
    if (std::system(command("start").c_str()) != 0) throw std::runtime_error("private MariaDB did not start");
  }
  ~private_db() { (void)std::system(command("stop").c_str()); }
  bool stop() { return std::system(command("stop").c_str()) == 0; }
  bool start() { return std::system(command("start").c_str()) == 0; }
  unsigned short port() const { return port_; }

 private:
  std::string command(const std::string& verb) const {
    return "CHANGEFLOW_DB_FAST=1 " + script_ + " " + verb + " --dir " + dir_ + "/db --port " + std::to_string(port_) +
           " >/dev/null 2>&1";
  }
  std::string dir_;
  unsigned short port_;
  std::string script_;
};

/// Points test_database (and therefore flow_env) at the private server.
void use_private_server(const private_db& db) {
  ::setenv("CHANGEFLOW_TEST_DB_HOST", "127.0.0.1", 1);
  ::setenv("CHANGEFLOW_TEST_DB_PORT", std::to_string(db.port()).c_str(), 1);
  ::unsetenv("CHANGEFLOW_TEST_DB_SOCKET");
}

struct tally {
  std::mutex mutex;
  std::map<int, int> submit_status;  // HTTP status (0 = transport error) -> count, during the outage
  std::map<int, int> read_status;
  std::set<std::string> accepted;
  int healthz_failures = 0;
  int healthz_calls = 0;
  std::string bad_body;  // the first 503 without the UNAVAILABLE envelope, if any
};

}  // namespace

TEST(DatabaseOutage, ServiceSurvivesRefusesCleanlyAndEveryChangeContinues) {
  private_db server;
  use_private_server(server);
  flow_env env(json{{"db", {{"connect_timeout_ms", 500}, {"read_timeout_ms", 2000}}}, {"rate_limit", {{"submit", 0}}}},
               {"--callback-attempts", "80", "--callback-delay-ms", "1500", "--pipeline-duration-ms", "1500"});
  const auto service_pid = env.service().process().pid();
  const auto port = env.port();

  tally t;
  std::atomic<bool> outage{false}, done{false};
  std::atomic<int> seq{0};
  // Load: a steady stream of submits and status reads for the whole run.
  std::thread load([&] {
    while (!done) {
      int i = seq++;
      json body = {{"subject", "outage-user-" + std::to_string(i)},
                   {"target", "outage-svc-" + std::to_string(i)},
                   {"title", "outage change " + std::to_string(i)},
                   {"files", {{{"path", "config/outage-" + std::to_string(i) + ".yaml"}, {"content", "v: 1\n"}}}}};
      auto r = http_call("127.0.0.1", port, "POST", "/api/v1/changes", body.dump(), {}, std::chrono::seconds(8));
      std::string id;
      if (r.status == 202) id = json::parse(r.body)["data"]["operationId"].get<std::string>();
      std::string some_id;
      {
        std::lock_guard lock(t.mutex);
        if (!id.empty()) t.accepted.insert(id);
        if (outage) {
          ++t.submit_status[r.status];
          if (r.status == 503 && t.bad_body.empty() && r.body.find("\"UNAVAILABLE\"") == std::string::npos)
            t.bad_body = r.body;
        }
        if (!t.accepted.empty()) some_id = *t.accepted.begin();
      }
      if (!some_id.empty()) {
        auto g = http_call("127.0.0.1", port, "GET", "/api/v1/changes/" + some_id, {}, {}, std::chrono::seconds(8));
        std::lock_guard lock(t.mutex);
        if (outage) ++t.read_status[g.status];
      }
      // Pacing of the load generator (about 10 submits a second), not synchronization.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::thread health([&] {
    while (!done) {
      auto h = http_call("127.0.0.1", port, "GET", "/healthz", {}, {}, std::chrono::seconds(5));
      std::lock_guard lock(t.mutex);
      ++t.healthz_calls;
      if (h.status != 200) ++t.healthz_failures;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // probe pace, not synchronization
    }
  });
  auto stop_threads = [&] {
    done = true;
    load.join();
    health.join();
  };

  // Some changes in flight before the outage.
  bool warmed = wait_until(
      [&] {
        std::lock_guard lock(t.mutex);
        return t.accepted.size() >= 10;
      },
      std::chrono::seconds(60));
  if (!warmed) stop_threads();
  ASSERT_TRUE(warmed);
  const auto before_outage = std::stoi(env.db().scalar("SELECT COUNT(*) FROM operation WHERE phase <> 'VALIDATED'"));

  ASSERT_TRUE(server.stop());
  outage = true;
  const auto outage_until = std::chrono::steady_clock::now() + std::chrono::seconds(outage_seconds());
  // The outage lasts its full length; the load keeps running against the service meanwhile.
  wait_until([&] { return std::chrono::steady_clock::now() >= outage_until; },
             std::chrono::seconds(outage_seconds() + 5));
  outage = false;
  ASSERT_TRUE(server.start());
  // Keep loading for a moment after the restart, then let everything finish.
  const auto resumed = seq.load();
  wait_until([&] { return seq.load() >= resumed + 10; }, std::chrono::seconds(30));
  stop_threads();

  std::set<std::string> accepted;
  std::map<int, int> submits, reads;
  {
    std::lock_guard lock(t.mutex);
    accepted = t.accepted;
    submits = t.submit_status;
    reads = t.read_status;
  }
  std::cout << "accepted " << accepted.size() << ", in flight when the database stopped " << before_outage
            << ", outage " << outage_seconds() << " s; submits during the outage:";
  for (auto [s, n] : submits) std::cout << " " << s << "x" << n;
  std::cout << "; reads:";
  for (auto [s, n] : reads) std::cout << " " << s << "x" << n;
  std::cout << "; healthz " << t.healthz_calls << " calls\n";

  // During the outage: clear 503s, never a hang (status 0) or a 500.
  ASSERT_GT(submits[503], 0) << "no submit met the outage";
  for (auto [status, n] : submits) EXPECT_TRUE(status == 503 || status == 202) << n << " submits answered " << status;
  for (auto [status, n] : reads) EXPECT_TRUE(status == 503 || status == 200) << n << " reads answered " << status;
  EXPECT_TRUE(t.bad_body.empty()) << "503 without the UNAVAILABLE envelope: " << t.bad_body;
  EXPECT_EQ(t.healthz_failures, 0) << "of " << t.healthz_calls << " /healthz calls";

  // The same process served the whole run.
  EXPECT_TRUE(env.service().process().running());
  EXPECT_EQ(env.service().process().pid(), service_pid);

  // Every accepted change continues to VALIDATED.
  for (const auto& id : accepted) {
    auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(120));
    EXPECT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  }
  // Rejected submits wrote nothing: operations are exactly the accepted ones.
  EXPECT_EQ(std::stoul(env.db().scalar("SELECT COUNT(*) FROM operation")), accepted.size());

  // No side effect asked for twice, judged on the requests the sim received (refused repeats
  // included): the actors retried their transitions across the outage, not their external calls.
  auto stats = sim_stats(env);
  EXPECT_EQ(stats["merges"].size(), accepted.size());
  EXPECT_EQ(repeated_side_effects(stats), "");
  for (const auto& [mr, bots] : stats["approvals"].items()) EXPECT_EQ(bots.size(), 2u) << "both bots approved " << mr;
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM (SELECT operation_id FROM operation_event WHERE to_phase = "
                            "'VALIDATED' GROUP BY operation_id HAVING COUNT(*) > 1) d"),
            "0")
      << "one MERGED -> VALIDATED flip per operation";
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM binding b JOIN operation o ON o.operation_id = b.operation_id "
                            "WHERE o.phase <> b.phase"),
            "0");
}
