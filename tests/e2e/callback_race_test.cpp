// Duplicate callbacks raced through HTTP: N identical deliveries sent at the same moment by N real
// threads (a sender whose retries overlap, or several sender replicas), while the operation waits
// for exactly that callback. Whatever the interleaving, the delivery takes effect once: one APPLIED
// and N-1 DUPLICATE answers, one transition into the target step in the timeline, and the
// validation counter raised once. Seen to catch an apply_approval_callback that ignores the
// duplicate key of its ledger insert (copies answered OUT_OF_ORDER or 503) and a deploy handler
// that skips both the in-process delivery claim and the recorded-duplicate answer (copies answered
// IGNORED_STALE).

#include "base/ids.hpp"
#include "tests/support/flow_env.hpp"

#include <gtest/gtest.h>

#include <latch>
#include <map>
#include <thread>

using namespace changeflow;
using namespace changeflow::testing;
using nlohmann::json;

namespace {

constexpr int copies = 8;
// The defaults of changeflowd (callbacks.*_secret) and changeflow-sim.
constexpr const char* approval_secret = "demo-approval-secret";
constexpr const char* deploy_secret = "demo-deploy-secret";

/// Posts `body` from `copies` threads released together; returns outcome -> count ("HTTP <n>" for
/// an answer that is not a 200 with an outcome).
std::map<std::string, int> race(flow_env& env, const std::string& target, const std::string& body,
                                const std::vector<std::pair<std::string, std::string>>& headers) {
  std::vector<std::string> outcomes(copies);
  std::latch start(copies);
  {
    std::vector<std::jthread> senders;
    for (int i = 0; i < copies; ++i) {
      senders.emplace_back([&, i] {
        start.arrive_and_wait();  // every thread connects and sends at the same moment
        auto r = http_call("127.0.0.1", env.port(), "POST", target, body, headers, std::chrono::seconds(30));
        auto j = json::parse(r.body, nullptr, false);
        outcomes[i] = r.status == 200 && !j.is_discarded() && j.contains("data")
                          ? j["data"].value("outcome", "?")
                          : "HTTP " + std::to_string(r.status) + " " + r.body + r.error;
      });
    }
  }
  std::map<std::string, int> counted;
  for (const auto& o : outcomes) ++counted[o];
  return counted;
}

int events_into(flow_env& env, const std::string& id, const std::string& condition) {
  return std::stoi(
      env.db().scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + id + "' AND " + condition));
}

std::string submit_ok(flow_env& env, const std::string& title, const std::string& target) {
  auto r = env.submit(title, "racer", target);
  EXPECT_EQ(r.status, 202) << r.body << r.error;
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? std::string() : j["data"]["operationId"].get<std::string>();
}

// Reconciliation stays off: the raced deploy callback must be the only path to VALIDATED.
const json no_reconcile = {{"reconcile", {{"interval_ms", 0}}}, {"timeouts", {{"approval_wait_seconds", 600}}}};

}  // namespace

TEST(CallbackRace, IdenticalApprovalCallbacksAtOnceApplyOnce) {
  flow_env env(no_reconcile);
  // The sim's own decision is dropped: the test's copies are the only ones.
  env.add_fault({{"kind", "approval_callback"}, {"mode", "drop"}, {"match", "approval-race"}});
  auto id = submit_ok(env, "approval-race", "svc-approval-race");
  auto waiting = env.wait_for_step(id, "APPROVAL_SENT");
  ASSERT_EQ(waiting["step"]["name"], "APPROVAL_SENT") << waiting.dump(2);
  const double validated_before = env.metric_sum("changeflow_validated_total");
  ASSERT_GE(validated_before, 0);

  auto approval_id = env.db().scalar("SELECT approval_id FROM operation WHERE operation_id = '" + id + "'");
  std::string body = json{
      {"callbackId", ids::new_uuid()},
      {"approvalId", approval_id},
      {"operationId", id},
      {"result", "APPROVED"},
      {"approver",
       "race-approver"}}.dump();
  auto outcomes = race(env, "/api/v1/callbacks/approval", body,
                       {{"X-Signature", "sha256=" + ids::hmac_sha256_hex(approval_secret, body)}});
  EXPECT_EQ(outcomes, (std::map<std::string, int>{{"APPLIED", 1}, {"DUPLICATE", copies - 1}}));

  auto done = env.wait_for_phase(id, "VALIDATED");
  ASSERT_EQ(done["phase"], "VALIDATED") << done.dump(2);
  EXPECT_EQ(events_into(env, id, "to_step = 10017"), 1) << "one transition into APPROVAL_APPROVED";
  EXPECT_EQ(events_into(env, id, "to_phase = 'VALIDATED' AND from_phase <> 'VALIDATED'"), 1);
  EXPECT_EQ(
      env.db().scalar("SELECT COUNT(*) FROM callback_ledger WHERE kind = 'approval' AND operation_id = '" + id + "'"),
      "1");
  EXPECT_TRUE(wait_until([&] { return env.metric_sum("changeflow_validated_total") == validated_before + 1; },
                         std::chrono::seconds(10)));
  EXPECT_EQ(env.metric_sum("changeflow_validated_total"), validated_before + 1);
}

TEST(CallbackRace, IdenticalDeployCallbacksAtOnceValidateOnce) {
  flow_env env(no_reconcile);
  // The sim's own deploy confirmation is dropped: the test's copies are the only ones.
  env.add_fault({{"kind", "deploy_callback"}, {"mode", "drop"}, {"match", "deploy-race"}});
  auto id = submit_ok(env, "deploy-race", "svc-deploy-race");
  auto merged = env.wait_for_phase(id, "MERGED");
  ASSERT_EQ(merged["phase"], "MERGED") << merged.dump(2);
  ASSERT_TRUE(merged["mrIid"].is_number());
  const double validated_before = env.metric_sum("changeflow_validated_total");
  ASSERT_GE(validated_before, 0);

  std::string body = json{{"deliveryId", ids::new_uuid()}, {"project", "config/changes"},
                          {"mrIid", merged["mrIid"]},      {"pipelineId", 777},
                          {"status", "success"},           {"operationIds", {id}}}
                         .dump();
  auto outcomes = race(env, "/api/v1/callbacks/deploy", body,
                       {{"X-Gitlab-Token", deploy_secret}, {"X-Gitlab-Event", "Deployment Hook"}});
  EXPECT_EQ(outcomes, (std::map<std::string, int>{{"APPLIED", 1}, {"DUPLICATE", copies - 1}}));

  auto done = env.wait_for_phase(id, "VALIDATED");
  ASSERT_EQ(done["phase"], "VALIDATED") << done.dump(2);
  EXPECT_EQ(events_into(env, id, "to_step = 10301"), 1) << "one transition into CALLED_BACK";
  EXPECT_EQ(events_into(env, id, "to_phase = 'VALIDATED' AND from_phase <> 'VALIDATED'"), 1);
  EXPECT_EQ(env.db().scalar("SELECT outcome FROM callback_ledger WHERE kind = 'deploy'"), "APPLIED");
  EXPECT_EQ(env.metric_sum("changeflow_validated_total"), validated_before + 1);
}
