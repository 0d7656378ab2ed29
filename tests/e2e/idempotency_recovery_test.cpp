// changeflowd is SIGKILLed while a submit holds its idempotency key IN_FLIGHT (after idem_begin,
// before the operation exists). The restarted service must let the retry with the same key and body
// run instead of answering 409 REQUEST_IN_FLIGHT until the record expires, and the change must
// still go all the way, exactly once.

#include "base/ids.hpp"
#include "tests/support/flow_env.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

using header_list = std::vector<std::pair<std::string, std::string>>;

/// Sends the submit and kills the service while the request holds its key IN_FLIGHT (the service
/// holds it there: faults.hold_after_idempotency_begin_ms); `while_held` looks at the database just
/// before the kill. False when the submit never took its key (the test has failed then).
bool kill_while_key_held(flow_env& env, const json& body, const header_list& headers, const std::string& row,
                         const std::function<void()>& while_held, http_result& killed) {
  std::thread first([&] {
    killed =
        http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump(), headers, std::chrono::seconds(60));
  });
  bool held =
      wait_until([&] { return env.db().scalar("SELECT state FROM " + row) == "IN_FLIGHT"; }, std::chrono::seconds(20));
  if (held) while_held();
  env.kill_service();
  first.join();
  if (!held) ADD_FAILURE() << "the submit never took its key; it answered " << killed.status << " " << killed.body;
  return held;
}

}  // namespace

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
  const header_list headers = {{"Idempotency-Key", key}};

  http_result killed;
  ASSERT_TRUE(kill_while_key_held(
      env, body, headers, row,
      [&] {
        EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation WHERE operation_id = '" + op + "'"), "0")
            << "the kill must land before the operation is created";
      },
      killed));
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

// A submission keyed by an Idempotency-Key alone (no operationId) gets a fresh time-ordered id,
// stored with its key. When the request dies after taking the key, the retry, which chose an id of
// its own, takes the key over and creates the change the dead request named: its id comes from the
// key's record, so a dead request that got further than this one (its change created) is found, not
// doubled. A record that names no change (written before migration 19, whose requests derived the
// id from the key) gets the derived id.
namespace {

void retry_after_crash(const std::string& key, bool record_names_no_change) {
  flow_env env(json{{"instance", {{"id", "idem-crash-" + key}, {"lease_seconds", 30}}},
                    {"idempotency", {{"in_flight_timeout_ms", 600000}}},
                    {"faults", {{"hold_after_idempotency_begin_ms", 60000}}}});
  const std::string scoped = "submit:anonymous:" + key;
  const std::string row = "idempotency_record WHERE idem_key = '" + scoped + "'";
  json body = {{"subject", "nina-" + key},
               {"target", "svc-idem-named"},
               {"title", "the retry creates the change the dead request named"},
               {"files", {{{"path", "config/svc-idem-named.yaml"}, {"content", "value: 1\n"}}}}};
  const header_list headers = {{"Idempotency-Key", key}};

  http_result killed;
  std::string named;
  ASSERT_TRUE(kill_while_key_held(
      env, body, headers, row, [&] { named = env.db().scalar("SELECT operation_id FROM " + row); }, killed));
  ASSERT_EQ(named.size(), 36u) << "the key names its change: '" << named << "'";
  EXPECT_EQ(named[14], '7') << "a time-ordered id (UUID version 7): " << named;
  if (record_names_no_change) {
    env.db().exec("UPDATE idempotency_record SET operation_id = NULL WHERE idem_key = '" + scoped + "'");
    named = changeflow::ids::uuid_from_name(scoped);
  }

  env.restart_service(json{{"faults", {{"hold_after_idempotency_begin_ms", 0}}}});
  auto retry = http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump(), headers);
  ASSERT_EQ(retry.status, 202) << retry.body;
  auto answer = json::parse(retry.body);
  EXPECT_EQ(answer["code"], "ACCEPTED");
  EXPECT_EQ(answer["data"]["operationId"], named) << "the change the dead request named, not the retry's own id";
  EXPECT_EQ(env.db().scalar("SELECT CONCAT(state, ' ', takeovers) FROM " + row), "COMPLETED 1");
  auto done = env.wait_for_phase(named, "VALIDATED");
  EXPECT_EQ(done.value("phase", ""), "VALIDATED") << done.dump(2);
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation WHERE subject_id = 'nina-" + key + "'"), "1");
}

}  // namespace

TEST(IdempotencyRecovery, ARetryOfAKeyedSubmissionCreatesTheChangeTheDeadRequestNamed) {
  retry_after_crash("named", false);
}

TEST(IdempotencyRecovery, ARetryOverARecordThatNamesNoChangeUsesTheIdDerivedFromTheKey) {
  retry_after_crash("unnamed", true);
}
