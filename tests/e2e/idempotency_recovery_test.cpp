// changeflowd is SIGKILLed while a submit holds its idempotency key IN_FLIGHT (after idem_begin,
// before the operation exists). The restarted service must let the retry with the same key and body
// run instead of answering 409 REQUEST_IN_FLIGHT until the record expires, and the change must
// still go all the way, exactly once.

#include "tests/support/flow_env.hpp"

#include <gtest/gtest.h>

#include <thread>

using namespace changeflow::testing;
using nlohmann::json;

TEST(IdempotencyRecovery, SigkillBetweenBeginAndCompleteDoesNotBlockTheRetry) {
  // The same instance id after the restart: the killed process's lease is still fresh then, so only
  // the new registration epoch tells that its request is dead. The in-flight deadline is far away,
  // so it cannot be what frees the key.
  flow_env env(json{{"instance", {{"id", "idem-crash"}, {"lease_seconds", 30}}},
                    {"idempotency", {{"in_flight_timeout_ms", 600000}}},
                    {"faults", {{"hold_after_idempotency_begin_ms", 60000}}}});
  const std::string op = "5b2e4c1d-7777-4aaa-8bbb-123412341234";
  const std::string key = "retry-after-crash-1";
  const std::string row = "idempotency_record WHERE idem_key = 'submit:anonymous:" + key + "'";
  json body = {{"operationId", op},
               {"subject", "ivan"},
               {"target", "svc-idem-crash"},
               {"title", "survives a crash between begin and complete"},
               {"files", {{{"path", "config/svc-idem-crash.yaml"}, {"content", "value: 1\n"}}}}};
  const std::vector<std::pair<std::string, std::string>> headers = {{"Idempotency-Key", key}};

  http_result killed;
  std::thread first([&] {
    killed =
        http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump(), headers, std::chrono::seconds(60));
  });
  bool held =
      wait_until([&] { return env.db().scalar("SELECT state FROM " + row) == "IN_FLIGHT"; }, std::chrono::seconds(20));
  if (!held) {
    env.kill_service();
    first.join();
    FAIL() << "the submit never took its key; it answered " << killed.status << " " << killed.body;
  }
  ASSERT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation WHERE operation_id = '" + op + "'"), "0")
      << "the kill must land before the operation is created";
  env.kill_service();
  first.join();
  EXPECT_EQ(killed.status, 0) << "the first request died with the process: " << killed.body;
  ASSERT_EQ(env.db().scalar("SELECT state FROM " + row), "IN_FLIGHT") << "the dead request left its key behind";

  env.restart_service(json{{"faults", {{"hold_after_idempotency_begin_ms", 0}}}});
  auto retry = http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump(), headers);
  ASSERT_EQ(retry.status, 202) << retry.body;
  auto answer = json::parse(retry.body);
  EXPECT_EQ(answer["code"], "ACCEPTED") << "nothing was created before the kill, so the retry creates it";
  EXPECT_EQ(answer["data"]["operationId"], op);
  EXPECT_EQ(env.db().scalar("SELECT takeovers FROM " + row), "1");
  EXPECT_EQ(env.db().scalar("SELECT state FROM " + row), "COMPLETED");
  auto metrics = http_call("127.0.0.1", env.port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("changeflow_idempotency_takeovers_total{route=\"submit\"} 1"), std::string::npos)
      << "a takeover is counted";

  // The next retry is a plain replay of what the taken-over request stored.
  auto replay = http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump(), headers);
  EXPECT_EQ(replay.status, 202);
  EXPECT_EQ(replay.body, retry.body);
  EXPECT_EQ(replay.header("idempotent-replayed"), "true");

  auto done = env.wait_for_phase(op, "VALIDATED");
  EXPECT_EQ(done.value("phase", ""), "VALIDATED") << done.dump(2);
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation WHERE subject_id = 'ivan'"), "1")
      << "one submission, one operation";
  // One change outside too: the approval system was asked once (requests it received, refused ones
  // included) and one MR was merged once.
  auto stats = json::parse(env.sim_call("GET", "/_sim/stats").body);
  EXPECT_EQ(stats["requests"].value("approval_submit", 0), 1) << stats.dump();
  EXPECT_EQ(stats["merges"].size(), 1u) << stats.dump();
  for (const auto& [mr, count] : stats["merges"].items()) EXPECT_EQ(count.get<int>(), 1) << "merges of " << mr;
}
