// changeflowd as a process: health endpoints over real HTTP, readiness following the database,
// refusal of a broken config, and a clean stop on SIGTERM.

#include "tests/support/http_client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_db.hpp"

#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdlib>
#include <fstream>

using namespace changeflow::testing;
using nlohmann::json;

namespace {
json db_config(const changeflow::persistence::db_settings& s) {
  json c = test_secrets();
  c["db"] = {{"host", s.host}, {"port", s.port}, {"user", s.user}, {"password", s.password}, {"name", s.database}};
  return c;
}
}  // namespace

TEST(ServiceLifecycle, HealthReadyMetricsAndCleanStop) {
  test_database db(false);
  auto dir = make_temp_dir("cf-lifecycle");
  service_process svc(db_config(db.settings()), dir);

  auto health = http_call("127.0.0.1", svc.port(), "GET", "/healthz");
  EXPECT_EQ(health.status, 200) << health.error;

  // Ready once the start-up rehydration load has run (a moment after the port opens).
  http_result ready;
  EXPECT_TRUE(wait_until(
      [&] {
        ready = http_call("127.0.0.1", svc.port(), "GET", "/readyz");
        return ready.status == 200;
      },
      std::chrono::seconds(20)));
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_EQ(json::parse(ready.body)["data"]["status"], "ready");

  // The service migrated the empty database at start-up.
  EXPECT_NE(db.scalar("SELECT COUNT(*) FROM schema_migrations"), "0");

  auto metrics = http_call("127.0.0.1", svc.port(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.header("content-type").find("text/plain"), std::string::npos);
  EXPECT_NE(metrics.body.find("changeflow_build_info"), std::string::npos);
  EXPECT_NE(metrics.body.find("process_resident_memory_bytes"), std::string::npos);
  // Requests made above are visible in the latency histogram by route template.
  EXPECT_NE(metrics.body.find("route=\"/readyz\""), std::string::npos);

  auto missing = http_call("127.0.0.1", svc.port(), "GET", "/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(json::parse(missing.body)["code"], "NOT_FOUND");

  auto started = std::chrono::steady_clock::now();
  int status = svc.process().stop(SIGTERM, std::chrono::seconds(10));
  EXPECT_EQ(status, 0) << svc.process().log_contents();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  EXPECT_NE(svc.process().log_contents().find("shutdown.done"), std::string::npos);
}

TEST(ServiceLifecycle, ReadyzTurns503WhenDatabaseStops) {
  // A private server for this test alone, so stopping it does not disturb other tests.
  auto dir = make_temp_dir("cf-readyz");
  // A free port now (not a pid-derived one: that collided with ports other tests had picked).
  int port = free_port();
  std::string db_script = source_dir() + "/scripts/db";
  std::string start_cmd = db_script + " start --dir " + dir + "/db --port " + std::to_string(port) + " >/dev/null";
  std::string stop_cmd = db_script + " stop --dir " + dir + "/db --port " + std::to_string(port) + " >/dev/null";
  ASSERT_EQ(std::system(start_cmd.c_str()), 0);
  struct stopper {
    std::string cmd;
    ~stopper() { (void)std::system(cmd.c_str()); }
  } stop_db{stop_cmd};

  json cfg = test_secrets();
  cfg["db"] = {{"host", "127.0.0.1"},      {"port", port},         {"user", "changeflow"},
               {"password", "changeflow"}, {"name", "changeflow"}, {"connect_timeout_ms", 1000},
               {"read_timeout_ms", 1000}};
  service_process svc(cfg, dir);
  EXPECT_TRUE(wait_until([&] { return http_call("127.0.0.1", svc.port(), "GET", "/readyz").status == 200; },
                         std::chrono::seconds(10)));

  ASSERT_EQ(std::system(stop_cmd.c_str()), 0);
  http_result r;
  EXPECT_TRUE(wait_until(
      [&] {
        r = http_call("127.0.0.1", svc.port(), "GET", "/readyz");
        return r.status == 503;
      },
      std::chrono::seconds(20)));
  EXPECT_EQ(json::parse(r.body)["data"]["reason"], "database unreachable") << r.body;
  // Liveness does not depend on the database.
  EXPECT_EQ(http_call("127.0.0.1", svc.port(), "GET", "/healthz").status, 200);

  ASSERT_EQ(std::system(start_cmd.c_str()), 0);
  EXPECT_TRUE(wait_until([&] { return http_call("127.0.0.1", svc.port(), "GET", "/readyz").status == 200; },
                         std::chrono::seconds(20)));
}

TEST(ServiceLifecycle, BrokenConfigRefusesToStart) {
  auto dir = make_temp_dir("cf-badcfg");
  std::string path = dir + "/bad.json";
  std::ofstream(path) << R"({"http": {"port": "eighty"}, "dbb": {}})";
  child_process p({binary_path("changeflowd"), "--config", path}, dir + "/out.log");
  auto status = p.wait_exit(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value()) << "a broken config must stop the process";
  EXPECT_NE(*status, 0) << "a broken config must end with a failure status";
  auto log = p.log_contents();
  EXPECT_NE(log.find("http.port"), std::string::npos) << log;
  EXPECT_NE(log.find("dbb"), std::string::npos) << log;
}

TEST(ServiceLifecycle, APortInUseEndsTheStartBeforeItTakesALease) {
  test_database db(false);
  auto dir = make_temp_dir("cf-port-taken");
  json first_cfg = db_config(db.settings());
  first_cfg["instance"] = {{"id", "first-instance"}};
  service_process first(first_cfg, dir, "first");
  ASSERT_TRUE(wait_until([&] { return http_call("127.0.0.1", first.port(), "GET", "/readyz").status == 200; },
                         std::chrono::seconds(20)));

  // A second process configured for the same address: it must end with a failure status and a
  // reason, and never register itself or resume anything. (A process that gave up after starting
  // its actors would wait for them forever, deaf to SIGTERM, which stays blocked for sigwait.)
  json second_cfg = db_config(db.settings());
  second_cfg["instance"] = {{"id", "second-instance"}};
  second_cfg["http"] = {{"port", first.port()}};
  const std::string path = dir + "/second.json";
  std::ofstream(path) << second_cfg.dump(2);
  child_process second({binary_path("changeflowd"), "--config", path}, dir + "/second.log");
  auto status = second.wait_exit(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value()) << "a process that cannot listen must end; log: " << second.log_contents();
  EXPECT_NE(*status, 0);
  EXPECT_NE(second.log_contents().find("startup.listen_failed"), std::string::npos) << second.log_contents();
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM instance WHERE instance_id = 'second-instance'"), "0")
      << "the failed start registered an instance lease";
  // The first one is untouched.
  EXPECT_EQ(http_call("127.0.0.1", first.port(), "GET", "/readyz").status, 200);
}

TEST(ServiceLifecycle, AStopSignalWhileWaitingForTheDatabaseEndsTheStartAtOnce) {
  auto dir = make_temp_dir("cf-db-wait");
  json cfg = test_secrets();
  // Nothing listens there: start-up waits for the database (up to 30 s) before it starts anything.
  cfg["db"] = {{"host", "127.0.0.1"},      {"port", free_port()},  {"user", "changeflow"},
               {"password", "changeflow"}, {"name", "changeflow"}, {"connect_timeout_ms", 200}};
  cfg["http"] = {{"port", 0}};
  const std::string path = dir + "/c.json";
  std::ofstream(path) << cfg.dump(2);
  child_process p({binary_path("changeflowd"), "--config", path}, dir + "/out.log");
  ASSERT_TRUE(wait_until([&] { return p.log_contents().find("startup.waiting_for_database") != std::string::npos; },
                         std::chrono::seconds(20)))
      << p.log_contents();
  // Honoured within one retry pause, not after the 30 s deadline; a stop asked for is not a failure.
  EXPECT_EQ(p.stop(SIGTERM, std::chrono::seconds(10)), 0) << p.log_contents();
  EXPECT_NE(p.log_contents().find("shutdown.before_start"), std::string::npos) << p.log_contents();
  EXPECT_EQ(p.log_contents().find("startup.database_unreachable"), std::string::npos) << p.log_contents();
}

TEST(ServiceLifecycle, EnvironmentOverridesConfigFile) {
  auto dir = make_temp_dir("cf-envcfg");
  std::string path = dir + "/c.json";
  std::ofstream(path) << R"({"http": {"port": 1}})";
  child_process p({binary_path("changeflowd"), "--config", path, "--check-config"}, dir + "/out.log",
                  {{"CHANGEFLOW_HTTP_PORT", "not-a-number"}});
  auto status = p.wait_exit(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_NE(*status, 0) << "an unusable override fails the config check";
  EXPECT_NE(p.log_contents().find("CHANGEFLOW_HTTP_PORT"), std::string::npos) << p.log_contents();
}

TEST(ServiceLifecycle, AStopSignalWhileTheLeaseRegistrationWaitsEndsTheStartAtOnce) {
  test_database db(true);
  // The instance's row exists and another connection holds it locked, so the registration (an
  // upsert of that row) waits in the database. Its read timeout is far beyond the test's waits.
  db.exec(
      "INSERT INTO instance (instance_id, started_at, heartbeat_at, lease_until, epoch, status) "
      "VALUES ('held-instance', NOW(3), NOW(3), NOW(3), 1, 'STOPPED')");
  auto holder = db.connect();
  std::unique_ptr<sql::Statement> hold(holder->createStatement());
  hold->execute("START TRANSACTION");
  std::unique_ptr<sql::ResultSet>(
      hold->executeQuery("SELECT epoch FROM instance WHERE instance_id = 'held-instance' FOR UPDATE"));

  auto dir = make_temp_dir("cf-lease-wait");
  json cfg = db_config(db.settings());
  cfg["db"]["read_timeout_ms"] = 60000;
  cfg["instance"] = {{"id", "held-instance"}};
  cfg["http"] = {{"port", 0}};
  const std::string path = dir + "/c.json";
  std::ofstream(path) << cfg.dump(2);
  child_process p({binary_path("changeflowd"), "--config", path}, dir + "/out.log");
  // The registration is in the database, waiting for the row (a connection sees its user's own).
  test_connection watch(db);
  ASSERT_TRUE(wait_until(
      [&] {
        return watch.scalar(
                   "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO "
                   "instance%'") != "0";
      },
      std::chrono::seconds(30)))
      << p.log_contents();

  // Honoured at once, not after the registration's 10 s, and not as a failure.
  EXPECT_EQ(p.stop(SIGTERM, std::chrono::seconds(5)), 0) << p.log_contents();
  EXPECT_NE(p.log_contents().find("shutdown.before_start"), std::string::npos) << p.log_contents();
  EXPECT_EQ(p.log_contents().find("startup.instance_register_failed"), std::string::npos) << p.log_contents();
  EXPECT_EQ(p.log_contents().find("startup.ready"), std::string::npos) << p.log_contents();

  // The registration that waited does not take the lease once the lock is gone: its connection
  // closed with the process, so the server rolls it back. A locking read waits until it has ended.
  hold->execute("ROLLBACK");
  EXPECT_EQ(db.scalar("SELECT CONCAT(epoch, ' ', status) FROM instance WHERE instance_id = 'held-instance' LOCK IN "
                      "SHARE MODE"),
            "1 STOPPED");
}
