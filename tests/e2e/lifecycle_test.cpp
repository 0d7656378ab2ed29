// The everyday lifecycle over real HTTP (changeflowd + changeflow-sim + MariaDB): a target changed
// again and again, one change in flight at a time; cancel at each phase; operators closing failures
// (a forced one included) and confirming or closing a failed deploy; and a deploy delivery that was
// recorded by a process killed before it applied it.

#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"

#include <gtest/gtest.h>

#include <thread>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

constexpr const char* jwt_secret = "lifecycle-test-secret";
using headers = std::vector<std::pair<std::string, std::string>>;

json lifecycle_config() {
  return json{{"auth", {{"jwt_secret", jwt_secret}}}, {"rate_limit", {{"ops", 100000}, {"submit", 100000}}}};
}

json body_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

headers operator_headers() {
  return {{"Authorization", "Bearer " + mint_hs256(jwt_secret, "oncall", 600)}, {"Content-Type", "application/json"}};
}

http_result ops_action(flow_env& env, const std::string& id, const std::string& action,
                       const json& body = json::object()) {
  return http_call("127.0.0.1", env.port(), "POST", "/api/v1/ops/operations/" + id + "/" + action, body.dump(),
                   operator_headers());
}

http_result cancel(flow_env& env, const std::string& id) {
  return http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes/" + id + "/cancel",
                   json{{"reason", "not needed any more"}}.dump(), {{"Content-Type", "application/json"}});
}

std::string accepted(const http_result& r) {
  EXPECT_EQ(r.status, 202) << r.body << r.error;
  auto j = body_of(r);
  if (!j.contains("data") || !j["data"].contains("operationId")) return {};
  return j["data"]["operationId"].get<std::string>();
}

json sim_stats(flow_env& env) {
  return body_of(env.sim_call("GET", "/_sim/stats"));
}

std::int64_t request_count(const json& stats, const std::string& endpoint) {
  if (!stats.contains("requests") || !stats["requests"].contains(endpoint)) return 0;
  return stats["requests"][endpoint].get<std::int64_t>();
}

std::string sim_mr_state(flow_env& env, std::int64_t iid) {
  auto r = env.sim_call("GET", "/api/v4/projects/config%2Fchanges/merge_requests/" + std::to_string(iid), "",
                        {{"PRIVATE-TOKEN", "author-token"}});
  return body_of(r).value("state", "");
}

/// Submits a change whose title triggers the simulator fault `kind` and waits until it is at `step`;
/// answers its id and MR number.
std::pair<std::string, std::int64_t> faulted_change(flow_env& env, const std::string& kind, const std::string& title,
                                                    const std::string& subject, const std::string& target,
                                                    const std::string& step) {
  env.add_fault({{"kind", kind}, {"match", title}});
  auto id = accepted(env.submit(title, subject, target));
  auto c = env.wait_for_step(id, step);
  EXPECT_EQ(c["step"]["name"], step) << c.dump(2);
  return {id, c.value("mrIid", std::int64_t{0})};
}

/// The timeline event that entered `step`, or an empty object.
json event_into(const json& change, const std::string& step) {
  for (const auto& e : change["timeline"]) {
    if (e["to"] == step) return e;
  }
  return json::object();
}

}  // namespace

// One target, changed five times in a row: each change is accepted once the previous one has ended,
// each reaches VALIDATED, and every earlier change stays readable with its timeline. While one is in
// flight, another is refused with 409 naming it.
TEST(Lifecycle, SameTargetChangedFiveTimesOneInFlightAtATime) {
  flow_env env(lifecycle_config(), {"--pipeline-duration-ms", "300"});
  std::vector<std::string> done;
  for (int i = 0; i < 5; ++i) {
    auto id = accepted(env.submit("edit " + std::to_string(i), "payments", "payments.yaml"));
    ASSERT_FALSE(id.empty());
    // In flight: a second change to the same target names the blocker and what frees it.
    auto blocked = env.submit("concurrent edit " + std::to_string(i), "payments", "payments.yaml");
    ASSERT_EQ(blocked.status, 409) << blocked.body;
    auto b = body_of(blocked);
    EXPECT_EQ(b["code"], "IN_PROGRESS");
    // The blocker may end between the refusal and its read; then the answer says to retry.
    if (b["data"].contains("blockingStep")) {
      EXPECT_EQ(b["data"]["blockingOperationId"], id) << b.dump();
      EXPECT_FALSE(b["data"]["unblockedBy"].get<std::string>().empty());
    }
    auto c = env.wait_for_phase(id, "VALIDATED");
    ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
    EXPECT_EQ(c["reapplyAllowed"], true);
    done.push_back(id);
  }
  for (const auto& id : done) {
    auto c = env.get_change(id);
    EXPECT_EQ(c["phase"], "VALIDATED") << id;
    EXPECT_TRUE(is_subsequence({"APPROVAL_SENDING", "HANDLE_MERGED", "CALLED_BACK"}, timeline_steps(c))) << c.dump(2);
  }
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM binding WHERE target_key = 'payments.yaml'"), "1");
  EXPECT_EQ(env.db().scalar("SELECT operation_id FROM binding WHERE target_key = 'payments.yaml'"), done.back());
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM binding_history WHERE target_key = 'payments.yaml'"), "5");
  // Five MRs, each merged once.
  auto stats = sim_stats(env);
  EXPECT_EQ(stats["merges"].size(), 5u) << stats.dump();
}

// Pending approval: cancel withdraws the request in the approval system and ends in CANCELLED; a
// repeat answers "already cancelled"; the approval system's WITHDRAWN callback changes nothing; the
// target is free again.
TEST(Lifecycle, CancelWhileApprovalIsPendingWithdrawsIt) {
  // The simulated approver decides only after ten minutes: the request stays pending.
  flow_env env(lifecycle_config(), {"--callback-delay-ms", "600000"});
  auto id = accepted(env.submit("slow approver", "team-a", "a.yaml"));
  ASSERT_EQ(env.wait_for_step(id, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");

  auto r = cancel(env, id);
  ASSERT_EQ(r.status, 200) << r.body;
  auto b = body_of(r);
  EXPECT_EQ(b["data"]["phase"], "CANCELLED");
  EXPECT_EQ(b["data"]["withdrawn"], json::array({"approval request withdrawn"}));
  EXPECT_EQ(request_count(sim_stats(env), "approval_withdraw"), 1);

  auto again = cancel(env, id);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(body_of(again)["data"]["alreadyCancelled"], true);
  EXPECT_EQ(request_count(sim_stats(env), "approval_withdraw"), 1);  // a repeat withdraws nothing

  auto c = env.get_change(id);
  EXPECT_EQ(c["phase"], "CANCELLED");
  EXPECT_EQ(c["hint"], "REAPPLY_ALLOWED");
  auto ev = event_into(c, "CANCELLED");
  EXPECT_EQ(ev["actor"], "user:anonymous") << c.dump(2);
  EXPECT_NE(ev["cause"].get<std::string>().find("withdrawing the approval request"), std::string::npos) << ev.dump();
  // The WITHDRAWN callback the approval system sends is stale now: still CANCELLED, still one event.
  ASSERT_TRUE(wait_until(
      [&] { return env.db().scalar("SELECT COUNT(*) FROM callback_ledger WHERE operation_id = '" + id + "'") != "0"; },
      std::chrono::seconds(20)));
  c = env.get_change(id);
  EXPECT_EQ(c["step"]["name"], "CANCELLED");
  EXPECT_EQ(
      env.db().scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + id + "' AND to_step = 10203"),
      "1");
  // The target is free.
  auto next = accepted(env.submit("after the cancel", "team-a", "a.yaml"));
  EXPECT_NE(next, id);
}

// MR open (its pipeline never finishes): cancel closes the MR in GitLab. A change whose MR merged
// already cannot be cancelled: merged wins, and it goes on to VALIDATED.
TEST(Lifecycle, CancelClosesTheOpenMrAndMergedWins) {
  flow_env env(lifecycle_config());
  auto [open, iid] = faulted_change(env, "pipeline_hang", "hung pipeline", "team-b", "b.yaml", "CREATE_MR_OPENED");
  ASSERT_EQ(sim_mr_state(env, iid), "opened");
  auto r = cancel(env, open);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body_of(r)["data"]["withdrawn"], json::array({"MR !" + std::to_string(iid) + " closed"}));
  EXPECT_EQ(sim_mr_state(env, iid), "closed");
  EXPECT_EQ(env.get_change(open)["phase"], "CANCELLED");

  // Merged before the cancel: the deploy confirmation is held back so the change sits at MERGED.
  env.add_fault({{"kind", "deploy_callback"}, {"mode", "drop"}, {"match", "merged first"}});
  auto merged = accepted(env.submit("merged first", "team-b", "b2.yaml"));
  ASSERT_EQ(env.wait_for_phase(merged, "MERGED")["phase"], "MERGED");
  auto refused = cancel(env, merged);
  ASSERT_EQ(refused.status, 409) << refused.body;
  EXPECT_EQ(body_of(refused)["code"], "ALREADY_MERGED");
  EXPECT_EQ(env.get_change(merged)["phase"], "MERGED");

  // A merge that lands while the cancel closes the MR: the close finds it merged, merged wins.
  env.add_fault({{"kind", "pipeline_hang"}, {"match", "racing merge"}});
  env.add_fault({{"kind", "merged_before_close"}, {"match", "racing merge"}});
  auto racing = accepted(env.submit("racing merge", "team-b", "b3.yaml"));
  ASSERT_EQ(env.wait_for_step(racing, "CREATE_MR_OPENED")["step"]["name"], "CREATE_MR_OPENED");
  auto lost = cancel(env, racing);
  ASSERT_EQ(lost.status, 409) << lost.body;
  EXPECT_EQ(body_of(lost)["code"], "ALREADY_MERGED");
  auto rc = env.wait_for_phase(racing, "VALIDATED");
  ASSERT_EQ(rc["phase"], "VALIDATED") << rc.dump(2);
  EXPECT_TRUE(is_subsequence({"HANDLE_ALREADY_MERGED", "CALLED_BACK"}, timeline_steps(rc))) << rc.dump(2);
}

// An operator closes a failed check pipeline: the MR is closed in GitLab and the target is free.
TEST(Lifecycle, OperatorClosesAFailureAndItsMr) {
  flow_env env(lifecycle_config());
  auto [failed, iid] =
      faulted_change(env, "pipeline_fail", "red pipeline", "team-c", "c.yaml", "CREATE_PIPELINE_FAILED");
  auto closed = ops_action(env, failed, "close", {{"reason", "bad config"}});
  ASSERT_EQ(closed.status, 200) << closed.body;
  EXPECT_EQ(env.get_change(failed)["phase"], "CLOSED");
  EXPECT_EQ(sim_mr_state(env, iid), "closed");

  auto next_after_close = accepted(env.submit("after the close", "team-c", "c.yaml"));
  EXPECT_EQ(env.wait_for_phase(next_after_close, "VALIDATED")["phase"], "VALIDATED");
}

// A forced failure used to be a dead end. It holds the target until an operator closes it; the close
// withdraws the approval request that is still pending.
TEST(Lifecycle, ForcedFailureIsClosedAndItsPendingApprovalWithdrawn) {
  flow_env env(lifecycle_config(), {"--callback-delay-ms", "600000"});  // the approver never decides
  auto forced = accepted(env.submit("forced", "team-c", "c2.yaml"));
  ASSERT_EQ(env.wait_for_step(forced, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  ASSERT_EQ(ops_action(env, forced, "fail", {{"reason", "wrong team"}}).status, 200);
  auto f = env.get_change(forced);
  ASSERT_EQ(f["step"]["name"], "FORCED_FAILED");
  EXPECT_EQ(f["hint"], "CONTACT_MAINTAINERS");
  auto blocked = env.submit("next", "team-c", "c2.yaml");
  EXPECT_EQ(blocked.status, 409) << blocked.body;  // a failure holds the target until it is ended
  auto close_forced = ops_action(env, forced, "close");
  ASSERT_EQ(close_forced.status, 200) << close_forced.body;
  EXPECT_EQ(body_of(close_forced)["data"]["withdrawn"], json::array({"approval request withdrawn"}));
  EXPECT_EQ(env.get_change(forced)["phase"], "CLOSED");
  EXPECT_EQ(request_count(sim_stats(env), "approval_withdraw"), 1);
  accepted(env.submit("next", "team-c", "c2.yaml"));
}

// A failed deploy is a failure: DEPLOY_FAILED, hint CONTACT_MAINTAINERS, the pipeline id in the
// timeline. An operator confirms it (VALIDATED) or closes it (CLOSED); both free the target.
TEST(Lifecycle, FailedDeployIsAnExplicitFailureOperatorsResolve) {
  flow_env env(lifecycle_config());
  env.add_fault({{"kind", "deploy_callback"}, {"mode", "failed"}, {"match", "bad deploy"}});
  auto a = accepted(env.submit("bad deploy one", "team-d", "d.yaml"));
  auto b = accepted(env.submit("bad deploy two", "team-d", "d2.yaml"));
  for (const auto& id : {a, b}) {
    auto c = env.wait_for_step(id, "DEPLOY_FAILED");
    ASSERT_EQ(c["step"]["name"], "DEPLOY_FAILED") << c.dump(2);
    EXPECT_EQ(c["phase"], "HANDLE_FAILED");
    EXPECT_EQ(c["hint"], "CONTACT_MAINTAINERS");
    auto ev = event_into(c, "DEPLOY_FAILED");
    EXPECT_NE(ev["cause"].get<std::string>().find("deploy pipeline "), std::string::npos) << ev.dump();
    EXPECT_EQ(ev["actor"], "callback:deploy");
  }
  auto confirmed = ops_action(env, a, "confirm");
  ASSERT_EQ(confirmed.status, 200) << confirmed.body;
  EXPECT_EQ(env.get_change(a)["phase"], "VALIDATED");
  auto merges_before = sim_stats(env)["merges"].size();
  auto closed = ops_action(env, b, "close");
  ASSERT_EQ(closed.status, 200) << closed.body;
  EXPECT_EQ(env.get_change(b)["phase"], "CLOSED");
  EXPECT_EQ(body_of(closed)["data"]["withdrawn"], json::array());  // the merged MR is left alone
  EXPECT_EQ(sim_stats(env)["merges"].size(), merges_before);
  EXPECT_EQ(request_count(sim_stats(env), "update_mr"), 0);
  accepted(env.submit("fixed deploy", "team-d", "d2.yaml"));
}

// The deploy delivery is recorded, then the process dies before applying it. The sender's retry of
// the same delivery (it never saw a 2xx) applies it: the change is VALIDATED at once, not after
// reconciliation's minimum age. The delivery names no operation (it is matched by its MR number),
// so it takes the general path, which records before it applies; a success naming its one change
// is recorded and applied in one transaction, so no crash can come between the two.
TEST(Lifecycle, DeliveryRecordedBeforeACrashIsAppliedByItsRedelivery) {
  flow_env env(lifecycle_config());
  env.add_fault({{"kind", "deploy_callback"}, {"mode", "drop"}, {"match", "crashy deploy"}});
  auto id = accepted(env.submit("crashy deploy", "team-e", "e.yaml"));
  auto c = env.wait_for_phase(id, "MERGED");
  ASSERT_EQ(c["phase"], "MERGED") << c.dump(2);
  auto iid = c["mrIid"].get<std::int64_t>();

  env.restart_service({{"faults", {{"hold_after_deploy_record_ms", 60000}}}});
  json delivery = {{"deliveryId", "crash-delivery-1"},
                   {"project", "config/changes"},
                   {"mrIid", iid},
                   {"pipelineId", 4242},
                   {"status", "success"}};
  auto cfg = env.config();
  auto secret = cfg.contains("callbacks") && cfg["callbacks"].contains("deploy_secret")
                    ? cfg["callbacks"]["deploy_secret"].get<std::string>()
                    : std::string("demo-deploy-secret");
  headers h = {{"X-Gitlab-Token", secret}, {"Content-Type", "application/json"}};
  std::thread first(
      [&] { http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/deploy", delivery.dump(), h); });
  ASSERT_TRUE(wait_until(
      [&] {
        return env.db().scalar(
                   "SELECT COUNT(*) FROM callback_ledger WHERE delivery_id = "
                   "'deploy:crash-delivery-1' AND outcome = 'PENDING'") == "1";
      },
      std::chrono::seconds(30)));
  env.kill_service();
  first.join();
  EXPECT_EQ(env.db().scalar("SELECT phase FROM operation WHERE operation_id = '" + id + "'"), "MERGED");

  env.restart_service({{"faults", {{"hold_after_deploy_record_ms", 0}}}, {"reconcile", {{"min_age_seconds", 3600}}}});
  auto retry = http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/deploy", delivery.dump(), h);
  ASSERT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(body_of(retry)["data"]["outcome"], "APPLIED") << retry.body;
  EXPECT_EQ(env.get_change(id)["phase"], "VALIDATED");
  // A further copy is a plain duplicate.
  auto again = http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/deploy", delivery.dump(), h);
  EXPECT_EQ(body_of(again)["data"]["outcome"], "DUPLICATE") << again.body;
  EXPECT_EQ(env.db().scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:crash-delivery-1'"),
            "APPLIED");
}

// A restarted instance that cannot load its rows (here: the table is out of reach) does not report
// ready as if it had resumed them: /readyz stays 503 and says why, and the load keeps retrying. Once
// the rows are readable again it resumes them and turns ready.
TEST(Lifecycle, RehydrationThatCannotLoadItsRowsKeepsTheInstanceNotReady) {
  flow_env env(lifecycle_config(), {"--callback-delay-ms", "600000"});  // the change waits for approval
  auto id = accepted(env.submit("waits through a restart", "team-f", "f.yaml"));
  ASSERT_EQ(env.wait_for_step(id, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  env.kill_service();
  env.db().exec("RENAME TABLE operation TO operation_out_of_reach");
  env.restart_service();
  json ready;
  ASSERT_TRUE(wait_until(
      [&] {
        ready = body_of(http_call("127.0.0.1", env.port(), "GET", "/readyz"));
        return ready.value("message", "").find("rehydration cannot load its rows") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << ready.dump();
  EXPECT_EQ(ready["code"], "NOT_READY");
  env.db().exec("RENAME TABLE operation_out_of_reach TO operation");
  ASSERT_TRUE(wait_until([&] { return http_call("127.0.0.1", env.port(), "GET", "/readyz").status == 200; },
                         std::chrono::seconds(60)));
  EXPECT_EQ(env.get_change(id)["step"]["name"], "APPROVAL_SENT");
  auto log = env.service().process().log_contents();
  auto failed_at = log.find("rehydrate.load_failed");
  ASSERT_NE(failed_at, std::string::npos);
  EXPECT_GT(log.rfind("rehydrate.done"), failed_at) << "the load went on after its failures and finished";
}
