// The operator's truth over real HTTP (DB + sim + changeflowd): failed attempts and the last external
// error of every step are durable (they survive a restart and outlive the step), the change page's
// JSON carries step durations and the total time, and the attention view lists what needs a human
// with its reason, in words, oldest first. Every assertion is judged against what the simulator saw
// (its request log) or what the test did, not against what a constraint already guarantees.

#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"

#include "base/ids.hpp"

#include <gtest/gtest.h>

#include <chrono>

using namespace changeflow::testing;
using json = nlohmann::json;

namespace {

constexpr const char* jwt_secret = "attention-test-secret";
constexpr const char* deploy_secret = "demo-deploy-secret";
constexpr const char* approval_secret = "demo-approval-secret";

json body_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

json ops_get(flow_env& env, const std::string& target) {
  auto r = http_call("127.0.0.1", env.port(), "GET", target, {},
                     {{"Authorization", "Bearer " + mint_hs256(jwt_secret, "alice", 600)}});
  EXPECT_EQ(r.status, 200) << target << " " << r.body << r.error;
  return body_of(r)["data"];
}

std::string submit_ok(flow_env& env, const std::string& title, const std::string& target) {
  auto r = env.submit(title, "svc-owner", target);
  EXPECT_EQ(r.status, 202) << r.body << r.error;
  return body_of(r)["data"]["operationId"].get<std::string>();
}

/// The step-attempt entry of `step` in an ops change detail; null when absent.
json attempts_of(const json& detail, const std::string& step) {
  for (const auto& a : detail["stepAttempts"]) {
    if (a["step"]["name"] == step) return a;
  }
  return nullptr;
}

/// create_mr requests the simulator answered with `status` (0: answer dropped).
int create_mr_answers(flow_env& env, int status) {
  auto log = body_of(env.sim_call("GET", "/_sim/requests"));
  int n = 0;
  for (const auto& r : log["requests"]) n += r["endpoint"] == "create_mr" && r["status"] == status;
  return n;
}

TEST(OpsAttention, RetriesOfAStepAreDurableAndOutliveTheStep) {
  flow_env env({{"auth", {{"jwt_secret", jwt_secret}}}, {"rate_limit", {{"ops", 100000}, {"ops_read", 100000}}}});
  env.add_fault({{"kind", "status"}, {"endpoint", "create_mr"}, {"status", 503}, {"match", "retry-503"}, {"count", 3}});
  auto id = submit_ok(env, "retry-503 change", "svc-retry");
  // At least two failed attempts recorded: then the process goes away and comes back.
  json detail;
  ASSERT_TRUE(wait_until(
      [&] {
        detail = ops_get(env, "/api/v1/ops/operations/" + id);
        auto a = attempts_of(detail, "CREATE_STARTED");
        return a.is_object() && a["failedAttempts"].get<int>() >= 2;
      },
      std::chrono::seconds(60)))
      << detail.dump(2);
  env.restart_service();
  auto after_restart = attempts_of(ops_get(env, "/api/v1/ops/operations/" + id), "CREATE_STARTED");
  ASSERT_TRUE(after_restart.is_object());
  EXPECT_GE(after_restart["failedAttempts"].get<int>(), 2) << after_restart.dump(2);

  auto done = env.wait_for_phase(id, "VALIDATED");
  ASSERT_EQ(done["phase"], "VALIDATED") << done.dump(2);
  detail = ops_get(env, "/api/v1/ops/operations/" + id);
  auto a = attempts_of(detail, "CREATE_STARTED");
  ASSERT_TRUE(a.is_object()) << detail.dump(2);
  // Every 503 the simulator served is one recorded failed attempt, no more, no fewer.
  const int served_503 = create_mr_answers(env, 503);
  EXPECT_EQ(served_503, 3);
  EXPECT_EQ(a["failedAttempts"].get<int>(), served_503) << a.dump(2);
  EXPECT_EQ(a["lastErrorStatus"], 503) << a.dump(2);
  EXPECT_NE(a["lastError"].get<std::string>().find("503"), std::string::npos) << a.dump(2);
  EXPECT_GE(a["lastErrorAtMs"].get<std::int64_t>(), a["firstErrorAtMs"].get<std::int64_t>());
  // No other step met an error.
  EXPECT_EQ(detail["stepAttempts"].size(), 1u) << detail["stepAttempts"].dump(2);

  // The deploy result that validated it is listed on the change (a deploy delivery names an MR, not
  // an operation), as is the approval decision.
  int deploy_applied = 0, approval_applied = 0;
  for (const auto& c : detail["callbacks"]) {
    deploy_applied += c["kind"] == "deploy" && c["outcome"] == "APPLIED";
    approval_applied += c["kind"] == "approval" && c["outcome"] == "APPLIED";
  }
  EXPECT_EQ(deploy_applied, 1) << detail["callbacks"].dump(2);
  EXPECT_EQ(approval_applied, 1) << detail["callbacks"].dump(2);

  // Durations: each stay but the last has one, they add up to no more than the total, and the
  // retries did not write timeline events (one event per step change).
  std::int64_t sum = 0;
  int create_started_events = 0;
  const auto& tl = detail["timeline"];
  for (std::size_t i = 0; i < tl.size(); ++i) {
    // (the restart adds a takeover event by the reconciler: the owner changed, not the step)
    create_started_events += tl[i]["to"] == "CREATE_STARTED" && tl[i]["actor"] == "workflow";
    if (i + 1 < tl.size()) {
      ASSERT_TRUE(tl[i]["durationMs"].is_number()) << tl[i].dump();
      sum += tl[i]["durationMs"].get<std::int64_t>();
    }
  }
  EXPECT_EQ(create_started_events, 1) << tl.dump(2);
  EXPECT_TRUE(detail["ended"].get<bool>());
  EXPECT_GE(detail["totalMs"].get<std::int64_t>(), sum);
  EXPECT_GT(detail["totalMs"].get<std::int64_t>(), 0);
}

TEST(OpsAttention, ListsAFailureAnOverdueApprovalAndAnUnappliedCallbackWithTheirReasons) {
  // The simulated approver decides only after ten minutes: approvals stay open.
  flow_env env({{"auth", {{"jwt_secret", jwt_secret}}},
                {"rate_limit", {{"ops", 100000}, {"ops_read", 100000}}},
                {"ops", {{"attention_approval_after_s", 1}}}},
               {"--callback-delay-ms", "600000"});
  env.add_fault({{"kind", "status"}, {"endpoint", "approval_submit"}, {"status", 422}, {"match", "attn-refused"}});
  auto failed = submit_ok(env, "attn-refused change", "svc-attn-1");
  ASSERT_EQ(env.wait_for_step(failed, "APPROVAL_SUBMIT_FAILED")["step"]["name"], "APPROVAL_SUBMIT_FAILED");
  auto waiting = submit_ok(env, "attn-waiting change", "svc-attn-2");
  ASSERT_EQ(env.wait_for_step(waiting, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  // A deploy result for an MR no change has: recorded, ignored as stale.
  auto deploy = http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/deploy",
                          json{{"deliveryId", "attn-deploy-1"},
                               {"project", "config/changes"},
                               {"mrIid", 987654},
                               {"pipelineId", 1},
                               {"status", "success"}}
                              .dump(),
                          {{"Content-Type", "application/json"}, {"X-Gitlab-Token", deploy_secret}});
  ASSERT_EQ(deploy.status, 200) << deploy.body;
  // An approval for the failed change: it no longer waits for one.
  auto late_body = json{
      {"callbackId", "attn-approval-1"},
      {"approvalId", "apr-x"},
      {"operationId", failed},
      {"result", "APPROVED"},
      {"approver", "tester"},
      {"ext",
       json::object()}}.dump();
  auto late = http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/approval", late_body,
                        {{"Content-Type", "application/json"},
                         {"X-Signature", "sha256=" + changeflow::ids::hmac_sha256_hex(approval_secret, late_body)}});
  ASSERT_EQ(late.status, 200) << late.body;

  json view;
  auto find = [&](const std::string& reason, const std::string& key, const std::string& value) {
    for (const auto& i : view["items"]) {
      if (i["reason"] == reason && i[key].is_string() && i[key] == value) return i;
    }
    return json(nullptr);
  };
  ASSERT_TRUE(wait_until(
      [&] {
        view = ops_get(env, "/api/v1/ops/attention");
        return find("OVERDUE_APPROVAL", "operationId", waiting).is_object();
      },
      std::chrono::seconds(30)))
      << view.dump(2);

  auto f = find("FAILED", "operationId", failed);
  ASSERT_TRUE(f.is_object()) << view.dump(2);
  EXPECT_EQ(f["step"]["name"], "APPROVAL_SUBMIT_FAILED");
  EXPECT_NE(f["waitsFor"].get<std::string>().find("operator"), std::string::npos) << f.dump(2);
  EXPECT_EQ(f["lastErrorStatus"], 422) << f.dump(2);
  EXPECT_TRUE(f["lastErrorAtMs"].is_number()) << f.dump(2);

  auto o = find("OVERDUE_APPROVAL", "operationId", waiting);
  EXPECT_NE(o["waitsFor"].get<std::string>().find("approver"), std::string::npos) << o.dump(2);
  EXPECT_EQ(o["dueLabel"], "deadline");
  EXPECT_GT(o["dueMs"].get<std::int64_t>(), view["nowMs"].get<std::int64_t>()) << "the approval deadline is ahead";

  auto d = find("CALLBACK_UNAPPLIED", "deliveryId", "deploy:attn-deploy-1");
  ASSERT_TRUE(d.is_object()) << view.dump(2);
  EXPECT_EQ(d["callbackOutcome"], "IGNORED_STALE");
  auto a = find("CALLBACK_UNAPPLIED", "deliveryId", "attn-approval-1");
  ASSERT_TRUE(a.is_object()) << view.dump(2);
  EXPECT_EQ(a["operationId"], failed);

  // Counts per reason agree with the items; items are oldest first.
  std::map<std::string, int> counted;
  std::int64_t previous = 0;
  for (const auto& i : view["items"]) {
    ++counted[i["reason"].get<std::string>()];
    EXPECT_GE(i["sinceMs"].get<std::int64_t>(), previous) << "not sorted by age: " << view.dump(2);
    previous = i["sinceMs"].get<std::int64_t>();
  }
  for (const auto& [reason, n] : view["counts"].items()) EXPECT_EQ(counted[reason], n.get<int>()) << reason;
  // The changes list finds a change by title text or by part of its id (the end the console shows:
  // ids are time-ordered, so two changes made in the same minute share their first characters), and
  // counts matches.
  auto by_title = ops_get(env, "/api/v1/ops/operations?q=attn-waiting");
  ASSERT_EQ(by_title["items"].size(), 1u) << by_title.dump(2);
  EXPECT_EQ(by_title["items"][0]["operationId"], waiting);
  EXPECT_EQ(by_title["total"], 1);
  auto by_id = ops_get(env, "/api/v1/ops/operations?q=" + failed.substr(failed.size() - 8));
  ASSERT_EQ(by_id["items"].size(), 1u) << by_id.dump(2);
  EXPECT_EQ(by_id["items"][0]["operationId"], failed);
  // Shorter than 8 characters, a query matches an id only by its start (a short number is an MR
  // number far more often than a piece of an id).
  const auto tail = failed.substr(failed.size() - 4);
  const auto by_short = ops_get(env, "/api/v1/ops/operations?q=" + tail);
  ASSERT_TRUE(by_short["items"].is_array()) << by_short.dump(2);
  for (const auto& i : by_short["items"])
    EXPECT_EQ(i["operationId"].get<std::string>().rfind(tail, 0), 0u) << "matched inside an id: " << i.dump();
  EXPECT_EQ(ops_get(env, "/api/v1/ops/operations?q=" + failed.substr(0, 4))["total"], 2) << "both start alike";
  EXPECT_EQ(ops_get(env, "/api/v1/ops/operations?q=no-such-title%25")["total"], 0) << "% matches itself";
  EXPECT_EQ(ops_get(env, "/api/v1/ops/operations?limit=1")["total"], 2);

  // The change that still waits normally for its approval is not listed as anything else.
  int listed_waiting = 0;
  for (const auto& i : view["items"]) listed_waiting += i["operationId"] == waiting;
  EXPECT_EQ(listed_waiting, 1);
}

}  // namespace
