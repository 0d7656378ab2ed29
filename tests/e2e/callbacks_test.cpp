// Callbacks that cannot hurt, end to end against a real MariaDB, changeflow-sim and
// changeflowd: duplicate, stale, early and out-of-order approval callbacks; unauthenticated ones
// leave no trace; a lost deploy callback is converged by reconciliation only past the watermark and
// outside min_age; the two step orders coexist across a hot flip; a callback survives a restart.
// Approval decisions are posted by the test itself (signed like the approval system signs them),
// with the simulator's own decision pushed out of the test's lifetime.

#include "base/ids.hpp"
#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"

#include <gtest/gtest.h>
#include <jwt.h>

#include <cstdlib>
#include <ctime>
#include <regex>

using namespace changeflow;
using namespace changeflow::testing;
using json = nlohmann::json;

namespace {

constexpr const char* approval_secret = "demo-approval-secret";
constexpr const char* deploy_secret = "demo-deploy-secret";
constexpr const char* jwt_secret = "callbacks-test-secret";
const std::vector<std::string> no_sim_decision = {"--callback-delay-ms", "600000"};

json body_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

std::string submit_ok(flow_env& env, const std::string& title, const std::string& subject, const std::string& target) {
  auto r = env.submit(title, subject, target);
  EXPECT_EQ(r.status, 202) << r.body << r.error;
  auto j = body_of(r);
  if (!j.contains("data") || !j["data"].contains("operationId")) return {};
  return j["data"]["operationId"].get<std::string>();
}

/// POSTs exactly `body`, signed the way the approval system signs (HMAC-SHA256 of the raw body).
http_result post_signed_approval(flow_env& env, const std::string& body, const std::string& secret = approval_secret) {
  return http_call(
      "127.0.0.1", env.port(), "POST", "/api/v1/callbacks/approval", body,
      {{"Content-Type", "application/json"}, {"X-Signature", "sha256=" + ids::hmac_sha256_hex(secret, body)}});
}

std::string approval_body(const std::string& callback_id, const std::string& operation_id, const std::string& result,
                          const json& ext = json::object()) {
  return json{{"callbackId", callback_id}, {"approvalId", "apr-test"}, {"operationId", operation_id},
              {"result", result},          {"approver", "tester"},     {"ext", ext}}
      .dump();
}

std::string outcome_of(const http_result& r) {
  auto j = body_of(r);
  return j.contains("data") && j["data"].contains("outcome") ? j["data"]["outcome"].get<std::string>() : "";
}

http_result post_deploy(flow_env& env, const json& body, const std::string& token = deploy_secret) {
  return http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/deploy", body.dump(),
                   {{"Content-Type", "application/json"}, {"X-Gitlab-Token", token}});
}

std::string mint(const std::string& sub) {
  return changeflow::testing::mint_hs256(jwt_secret, sub, 600);
}

/// POST /api/v1/ops/reconcile as an operator; the run's report.
json reconcile_now(flow_env& env) {
  auto r = http_call("127.0.0.1", env.port(), "POST", "/api/v1/ops/reconcile", "{}",
                     {{"Content-Type", "application/json"}, {"Authorization", "Bearer " + mint("alice")}});
  EXPECT_EQ(r.status, 200) << r.body << r.error;
  auto j = body_of(r);
  return j.contains("data") ? j["data"] : json::object();
}

/// Value of one Prometheus sample from /metrics (0 when absent).
double metric(flow_env& env, const std::string& name, const std::string& labels) {
  auto r = http_call("127.0.0.1", env.port(), "GET", "/metrics");
  std::regex line("^" + name + "\\{" + labels + "\\} ([0-9.e+]+)$", std::regex::multiline);
  std::smatch m;
  if (!std::regex_search(r.body, m, line)) return 0;
  return std::stod(m[1].str());
}

std::string ledger_outcome(flow_env& env, const std::string& delivery_id) {
  return env.db().scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = '" + delivery_id + "'");
}

std::string event_count(flow_env& env, const std::string& operation_id) {
  return env.db().scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + operation_id + "'");
}

json base_config() {
  return json{{"auth", {{"jwt_secret", jwt_secret}}},
              {"rate_limit", {{"ops", 100000}}},
              {"instance", {{"id", "cb-e2e-instance"}}},
              {"timeouts", {{"approval_wait_seconds", 600}}}};
}

int occurrences(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (auto pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) ++n;
  return n;
}

/// Rewrites the running service's config with `flow.default = order` and waits until it reloaded.
void flip_flow(flow_env& env, const std::string& order) {
  auto before = occurrences(env.service().process().log_contents(), "config.reloaded");
  auto cfg = env.config();
  cfg["flow"]["default"] = order;
  env.service().rewrite_config(cfg);
  ASSERT_TRUE(
      wait_until([&] { return occurrences(env.service().process().log_contents(), "config.reloaded") > before; },
                 std::chrono::seconds(20)))
      << "the service did not reload its config";
}

}  // namespace

TEST(Callbacks, UnauthenticatedCallbacksAre401AndLeaveNoTrace) {
  flow_env env(base_config(), no_sim_decision);
  auto id = submit_ok(env, "unauth-1", "ua", "svc-ua");
  ASSERT_EQ(env.wait_for_step(id, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");

  auto body = approval_body("cb-unauth-1", id, "APPROVED");
  auto wrong = post_signed_approval(env, body, "not-the-secret");
  EXPECT_EQ(wrong.status, 401) << wrong.body;
  auto unsigned_call = http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/approval", body,
                                 {{"Content-Type", "application/json"}});
  EXPECT_EQ(unsigned_call.status, 401);
  auto deploy = post_deploy(
      env, {{"deliveryId", "d-unauth-1"}, {"project", "config/changes"}, {"mrIid", 1}, {"status", "success"}},
      "wrong-token");
  EXPECT_EQ(deploy.status, 401);

  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM callback_ledger"), "0");
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM deploy_callback"), "0");
  EXPECT_EQ(env.get_change(id)["step"]["name"], "APPROVAL_SENT");
  EXPECT_EQ(metric(env, "changeflow_callbacks_total", "kind=\"approval\",outcome=\"UNAUTHENTICATED\""), 2);
  EXPECT_EQ(metric(env, "changeflow_callbacks_total", "kind=\"deploy\",outcome=\"UNAUTHENTICATED\""), 1);
}

// A passivated wait stays without an actor while the owner's changed-row poll passes over it: the
// poll's list carries the step and the deadline, so the row is neither read whole nor offered to the
// spawn (which would refuse it, counting a passivation "at spawn"), on every pass that lists it.
TEST(Callbacks, ThePollOfChangedRowsLeavesAPassivatedWaitAlone) {
  auto config = base_config();
  config["durability"] = {{"inbox_poll_ms", 300}};  // a pass lists rows changed within 4 x 300 ms + 2 s
  flow_env env(config, no_sim_decision);
  auto id = submit_ok(env, "idle-wait-1", "iw", "svc-iw");
  ASSERT_EQ(env.wait_for_step(id, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  ASSERT_TRUE(wait_until([&] { return metric(env, "changeflow_passivated_total", "when=\"wait\"") >= 1; },
                         std::chrono::seconds(10)));
  // Counted from here: while the change was being created a pass may have met it before its actor
  // was registered, and that is the spawn's own business.
  const double refused = metric(env, "changeflow_passivated_total", "when=\"spawn\"");
  const double passes = env.metric_sum("changeflow_inbox_passes_total");
  ASSERT_TRUE(wait_until([&] { return env.metric_sum("changeflow_inbox_passes_total") >= passes + 2; },
                         std::chrono::seconds(10)));
  // Those passes listed the row: it changed within their look-back.
  EXPECT_EQ(env.db().scalar("SELECT TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(3)) < 3200000 FROM operation "
                            "WHERE operation_id = '" +
                            id + "'"),
            "1");
  EXPECT_EQ(metric(env, "changeflow_passivated_total", "when=\"spawn\""), refused);
  EXPECT_EQ(env.get_change(id)["live"], false);
  // What moves it still brings an actor back.
  auto decided = post_signed_approval(env, approval_body("cb-idle-1", id, "APPROVED"));
  ASSERT_EQ(decided.status, 200) << decided.body;
  EXPECT_EQ(env.wait_for_phase(id, "VALIDATED")["phase"], "VALIDATED");
}

TEST(Callbacks, DuplicateDeliveryIsDuplicateAndChangesNothing) {
  flow_env env(base_config(), no_sim_decision);
  auto id = submit_ok(env, "dup-cb-1", "du", "svc-du");
  ASSERT_EQ(env.wait_for_step(id, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  // A wait of days holds no actor (durability.passivate_beyond_seconds): the callback brings it back.
  // The count comes as the actor decides to stop; it leaves the registry a moment later.
  ASSERT_TRUE(wait_until([&] { return metric(env, "changeflow_passivated_total", "when=\"wait\"") >= 1; },
                         std::chrono::seconds(10)));
  EXPECT_TRUE(wait_until([&] { return env.get_change(id)["live"] == false; }, std::chrono::seconds(10)))
      << env.get_change(id).dump(2);
  auto body = approval_body("cb-dup-1", id, "APPROVED");

  auto first = post_signed_approval(env, body);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(outcome_of(first), "APPLIED");
  auto done = env.wait_for_phase(id, "VALIDATED");
  ASSERT_EQ(done["phase"], "VALIDATED") << done.dump(2);
  auto events = event_count(env, id);

  auto again = post_signed_approval(env, body);  // the same signed delivery, byte for byte
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(outcome_of(again), "DUPLICATE");
  EXPECT_EQ(env.get_change(id)["phase"], "VALIDATED");
  EXPECT_EQ(event_count(env, id), events);
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM callback_ledger WHERE delivery_id = 'cb-dup-1'"), "1");
  EXPECT_EQ(ledger_outcome(env, "cb-dup-1"), "APPLIED");
  auto steps = timeline_steps(env.get_change(id));
  EXPECT_EQ(std::count(steps.begin(), steps.end(), "APPROVAL_APPROVED"), 1);
  EXPECT_EQ(metric(env, "changeflow_callbacks_total", "kind=\"approval\",outcome=\"DUPLICATE\""), 1);
}

// An approval system that restarted reissues delivery ids. The same id for ANOTHER operation is
// refused loudly (409, counted, on that change's callback list), never dropped as a duplicate of
// the first; the change it named still completes when its decision comes with a fresh id.
TEST(Callbacks, ADeliveryIdReusedForAnotherOperationIsRefusedAndCounted) {
  flow_env env(base_config(), no_sim_decision);
  auto first = submit_ok(env, "reuse-1", "ru", "svc-ru-1");
  auto second = submit_ok(env, "reuse-2", "ru", "svc-ru-2");
  ASSERT_EQ(env.wait_for_step(first, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  ASSERT_EQ(env.wait_for_step(second, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  ASSERT_EQ(outcome_of(post_signed_approval(env, approval_body("cb-reissued-1", first, "APPROVED"))), "APPLIED");

  auto reused = post_signed_approval(env, approval_body("cb-reissued-1", second, "APPROVED"));
  EXPECT_EQ(reused.status, 409) << reused.body;
  EXPECT_EQ(body_of(reused)["code"], "DELIVERY_ID_REUSED") << reused.body;
  EXPECT_EQ(metric(env, "changeflow_callbacks_total", "kind=\"approval\",outcome=\"ID_REUSED\""), 1);
  EXPECT_EQ(metric(env, "changeflow_callbacks_total", "kind=\"approval\",outcome=\"DUPLICATE\""), 0);
  EXPECT_EQ(env.get_change(second)["step"]["name"], "APPROVAL_SENT") << "nothing applied to the second change";
  auto listed = http_call("127.0.0.1", env.port(), "GET", "/api/v1/ops/operations/" + second, "",
                          {{"Authorization", "Bearer " + mint("alice")}});
  ASSERT_EQ(listed.status, 200) << listed.body;
  auto callbacks = body_of(listed)["data"]["callbacks"];
  ASSERT_EQ(callbacks.size(), 1u) << callbacks.dump();
  EXPECT_EQ(callbacks[0]["outcome"], "ID_REUSED");

  EXPECT_EQ(outcome_of(post_signed_approval(env, approval_body("cb-reissued-2", second, "APPROVED"))), "APPLIED");
  EXPECT_EQ(env.wait_for_phase(first, "VALIDATED")["phase"], "VALIDATED");
  EXPECT_EQ(env.wait_for_phase(second, "VALIDATED")["phase"], "VALIDATED");
}

TEST(Callbacks, LateRejectionOrderAndReplacedOperationAreHarmless) {
  flow_env env(base_config(), no_sim_decision);
  auto old_op = submit_ok(env, "stale-1", "st", "svc-st");
  ASSERT_EQ(env.wait_for_step(old_op, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");

  auto rejected = post_signed_approval(env, approval_body("cb-rej-1", old_op, "REJECTED"));
  EXPECT_EQ(outcome_of(rejected), "APPLIED") << rejected.body;
  ASSERT_EQ(env.wait_for_phase(old_op, "REJECTED")["phase"], "REJECTED");

  // Rejected, then a late APPROVED for the same operation: out of order, nothing moves.
  auto late = post_signed_approval(env, approval_body("cb-late-1", old_op, "APPROVED"));
  ASSERT_EQ(late.status, 200) << late.body;
  EXPECT_EQ(outcome_of(late), "OUT_OF_ORDER");
  EXPECT_EQ(ledger_outcome(env, "cb-late-1"), "OUT_OF_ORDER");
  EXPECT_EQ(env.get_change(old_op)["step"]["name"], "APPROVAL_REJECTED");

  // A re-apply gives the binding a new operation; a callback for the old one is stale.
  auto fresh = submit_ok(env, "stale-2", "st", "svc-st");
  ASSERT_NE(fresh, old_op);
  ASSERT_EQ(env.wait_for_step(fresh, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  auto fresh_events = event_count(env, fresh);
  auto stale = post_signed_approval(env, approval_body("cb-stale-1", old_op, "APPROVED"));
  ASSERT_EQ(stale.status, 200) << stale.body;
  EXPECT_EQ(outcome_of(stale), "IGNORED_STALE");
  EXPECT_EQ(ledger_outcome(env, "cb-stale-1"), "IGNORED_STALE");
  EXPECT_EQ(env.get_change(fresh)["step"]["name"], "APPROVAL_SENT");  // the new operation is unaffected
  EXPECT_EQ(event_count(env, fresh), fresh_events);
  EXPECT_EQ(env.get_change(old_op)["step"]["name"], "APPROVAL_REJECTED");

  // The new operation's own decision still works.
  EXPECT_EQ(outcome_of(post_signed_approval(env, approval_body("cb-fresh-1", fresh, "APPROVED"))), "APPLIED");
  EXPECT_EQ(env.wait_for_phase(fresh, "VALIDATED")["phase"], "VALIDATED");
  EXPECT_EQ(metric(env, "changeflow_callbacks_total", "kind=\"approval\",outcome=\"IGNORED_STALE\""), 1);
  EXPECT_EQ(metric(env, "changeflow_callbacks_total", "kind=\"approval\",outcome=\"OUT_OF_ORDER\""), 1);
}

TEST(Callbacks, ApprovalArrivingBeforeSentIsWrittenIsApplied) {
  flow_env env(base_config(), no_sim_decision);
  // The approval system takes its time to answer our submission: the operation stays in
  // APPROVAL_SENDING while the decision callback arrives.
  env.add_fault(
      {{"kind", "slow"}, {"endpoint", "approval_submit"}, {"match", "early-1"}, {"delay_ms", 2500}, {"count", 1}});
  auto id = submit_ok(env, "early-1", "ea", "svc-ea");
  ASSERT_EQ(env.get_change(id)["step"]["name"], "APPROVAL_SENDING");
  auto r = post_signed_approval(env, approval_body("cb-early-1", id, "APPROVED"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(outcome_of(r), "APPLIED");
  auto c = env.wait_for_phase(id, "VALIDATED");
  ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  bool approved_from_sending = false;
  for (const auto& e : c["timeline"]) {
    if (e["to"] == "APPROVAL_APPROVED")
      approved_from_sending = e["from"] == "APPROVAL_SENDING" && e["actor"] == "callback";
  }
  EXPECT_TRUE(approved_from_sending) << c.dump(2);
}

TEST(Callbacks, LostDeployCallbackConvergesOnlyPastTheWatermarkAndOutsideMinAge) {
  json cfg = base_config();
  cfg["reconcile"] = {{"interval_ms", 0}, {"min_age_seconds", 0}, {"max_age_seconds", 3600}};
  // The deploy takes a while after the merge, as real ones do, so a callback does not overtake our
  // MERGED write (that race is answered OUT_OF_ORDER and converged by reconciliation).
  flow_env env(cfg, {"--pipeline-duration-ms", "400"});
  env.add_fault({{"kind", "deploy_callback"}, {"mode", "drop"}, {"match", "lost-1"}});
  env.add_fault({{"kind", "deploy_callback"}, {"mode", "no_operation_ids"}, {"match", "later-1"}});
  env.add_fault({{"kind", "deploy_callback"}, {"mode", "failed"}, {"match", "failed-1"}});

  auto lost = submit_ok(env, "lost-1", "lo", "svc-lost");
  auto merged = env.wait_for_phase(lost, "MERGED");
  ASSERT_EQ(merged["phase"], "MERGED") << merged.dump(2);
  const auto lost_mr = merged["mrIid"].get<std::int64_t>();

  // Nothing was called back yet: no watermark, the lost one waits.
  auto r1 = reconcile_now(env);
  EXPECT_EQ(r1["validated"], 0) << r1.dump();
  EXPECT_GE(r1["waiting"].get<int>(), 1) << r1.dump();
  EXPECT_TRUE(r1["watermark"].is_null()) << r1.dump();
  EXPECT_EQ(env.get_change(lost)["phase"], "MERGED");

  // A later MR is deployed; its callback carries no operation ids and is matched by MR number.
  auto later = submit_ok(env, "later-1", "lo", "svc-later");
  auto later_done = env.wait_for_phase(later, "VALIDATED");
  ASSERT_EQ(later_done["phase"], "VALIDATED") << later_done.dump(2);
  const auto later_mr = later_done["mrIid"].get<std::int64_t>();
  ASSERT_GT(later_mr, lost_mr);
  EXPECT_EQ(metric(env, "changeflow_validated_total", "via=\"callback\""), 1);
  EXPECT_EQ(env.db().scalar("SELECT outcome FROM callback_ledger WHERE kind = 'deploy'"), "APPLIED");

  // A failed deploy is recorded and counted, validates nothing and does not raise the watermark; the
  // change is an explicit failure (DEPLOY_FAILED), no longer waiting for a confirmation.
  auto failed = submit_ok(env, "failed-1", "lo", "svc-failed");
  ASSERT_EQ(env.wait_for_phase(failed, "MERGED")["phase"], "MERGED");
  ASSERT_TRUE(wait_until(
      [&] {
        return env.db().scalar(
                   "SELECT COUNT(*) FROM callback_ledger WHERE kind = 'deploy' AND outcome = 'DEPLOY_FAILED'") == "1";
      },
      std::chrono::seconds(30)));
  EXPECT_EQ(env.get_change(failed)["step"]["name"], "DEPLOY_FAILED");

  // Redelivery of a deploy callback is a DUPLICATE.
  json replay = {
      {"deliveryId", "manual-d-1"}, {"project", "config/changes"}, {"mrIid", later_mr}, {"status", "success"}};
  EXPECT_EQ(outcome_of(post_deploy(env, replay)), "IGNORED_STALE");  // already validated
  EXPECT_EQ(outcome_of(post_deploy(env, replay)), "DUPLICATE");

  // The watermark passed the lost MR, but inside min_age nothing is inferred.
  env.restart_service({{"reconcile", {{"min_age_seconds", 3600}}}});
  auto r2 = reconcile_now(env);
  EXPECT_EQ(r2["scanned"], 0) << r2.dump();
  EXPECT_EQ(env.get_change(lost)["phase"], "MERGED");

  // Outside min_age and under the watermark: converged, by reconciliation.
  env.restart_service({{"reconcile", {{"min_age_seconds", 0}}}});
  auto r3 = reconcile_now(env);
  EXPECT_EQ(r3["watermark"], later_mr) << r3.dump();
  EXPECT_EQ(r3["validated"], 1) << r3.dump();
  EXPECT_EQ(r3["waiting"], 0) << r3.dump();  // failed-1 is DEPLOY_FAILED: nothing to reconcile
  auto converged = env.get_change(lost);
  EXPECT_EQ(converged["phase"], "VALIDATED") << converged.dump(2);
  EXPECT_EQ(converged["timeline"].back()["actor"], "reconciler");
  EXPECT_EQ(converged["timeline"].back()["cause"], "validated via reconciliation");
  EXPECT_EQ(env.get_change(failed)["step"]["name"], "DEPLOY_FAILED");
  EXPECT_EQ(metric(env, "changeflow_validated_total", "via=\"reconciliation\""), 1);
  // Running it again changes and counts nothing.
  EXPECT_EQ(reconcile_now(env)["validated"], 0);
  EXPECT_EQ(metric(env, "changeflow_validated_total", "via=\"reconciliation\""), 1);
}

TEST(Callbacks, FlippingTheStepOrderKeepsInFlightApprovalsOnTheirOrder) {
  flow_env env(base_config(), no_sim_decision);
  auto a = submit_ok(env, "order-a", "or", "svc-a");  // approve_then_create (the default)
  ASSERT_EQ(env.wait_for_step(a, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  EXPECT_EQ(env.get_change(a)["flow"], "approve_then_create");

  flip_flow(env, "create_then_approve");
  auto b = submit_ok(env, "order-b", "or", "svc-b");  // legacy: MR first, then approval with ext.mrId
  auto b_sent = env.wait_for_step(b, "APPROVAL_SENT");
  ASSERT_EQ(b_sent["step"]["name"], "APPROVAL_SENT") << b_sent.dump(2);
  EXPECT_EQ(b_sent["flow"], "create_then_approve");
  ASSERT_TRUE(b_sent["mrIid"].is_number());
  const auto b_mr = b_sent["mrIid"].get<std::int64_t>();

  // Flip back while both approvals are in flight; new operations follow the switch...
  flip_flow(env, "approve_then_create");
  auto c = submit_ok(env, "order-c", "or", "svc-c");
  EXPECT_EQ(env.get_change(c)["flow"], "approve_then_create");

  // ...and each in-flight one finishes in the order it started.
  EXPECT_EQ(outcome_of(post_signed_approval(
                env, approval_body("cb-order-b", b, "APPROVED", {{"mrId", std::to_string(b_mr)}}))),
            "APPLIED");
  EXPECT_EQ(outcome_of(post_signed_approval(env, approval_body("cb-order-a", a, "APPROVED"))), "APPLIED");
  auto a_done = env.wait_for_phase(a, "VALIDATED");
  auto b_done = env.wait_for_phase(b, "VALIDATED");
  ASSERT_EQ(a_done["phase"], "VALIDATED") << a_done.dump(2);
  ASSERT_EQ(b_done["phase"], "VALIDATED") << b_done.dump(2);

  auto a_steps = timeline_steps(a_done);
  EXPECT_TRUE(is_subsequence({"APPROVAL_SENDING", "APPROVAL_SENT", "APPROVAL_APPROVED", "CREATE_STARTED",
                              "CREATE_SUCCEEDED", "HANDLE_APPROVED", "HANDLE_MERGED", "CALLED_BACK"},
                             a_steps))
      << a_done.dump(2);
  auto b_steps = timeline_steps(b_done);
  EXPECT_TRUE(is_subsequence({"CREATE_STARTED", "CREATE_SUCCEEDED", "APPROVAL_SENDING", "APPROVAL_SENT",
                              "APPROVAL_APPROVED", "HANDLE_STARTED", "HANDLE_MERGED", "CALLED_BACK"},
                             b_steps))
      << b_done.dump(2);
  // The legacy approval was handled on the MR it already had: no second MR.
  EXPECT_EQ(std::count(b_steps.begin(), b_steps.end(), "CREATE_STARTED"), 1) << b_done.dump(2);
  EXPECT_EQ(b_done["mrIid"], b_mr);
  EXPECT_EQ(b_done["flow"], "create_then_approve");
}

TEST(Callbacks, CallbackIsNotLostAcrossARestart) {
  flow_env env(base_config(), no_sim_decision);

  // 1. The service stops while the operation waits for its approval; the callback arrives after
  //    the restart and the operation continues (the nudge spawns its actor from the row).
  auto waiting = submit_ok(env, "restart-1", "re", "svc-r1");
  ASSERT_EQ(env.wait_for_step(waiting, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  env.restart_service();  // a clean stop and start
  auto after = post_signed_approval(env, approval_body("cb-restart-1", waiting, "APPROVED"));
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(outcome_of(after), "APPLIED");
  EXPECT_EQ(env.wait_for_phase(waiting, "VALIDATED")["phase"], "VALIDATED");

  // 2. The callback is accepted, then the process dies (SIGKILL) before the actor gets far: the
  //    decision is durable, and after the restart the operation continues.
  env.add_fault(
      {{"kind", "slow"}, {"endpoint", "create_mr"}, {"match", "restart-2"}, {"delay_ms", 1500}, {"count", 1}});
  auto crashing = submit_ok(env, "restart-2", "re", "svc-r2");
  ASSERT_EQ(env.wait_for_step(crashing, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  auto body = approval_body("cb-restart-2", crashing, "APPROVED");
  auto accepted = post_signed_approval(env, body);
  ASSERT_EQ(accepted.status, 200) << accepted.body;
  EXPECT_EQ(outcome_of(accepted), "APPLIED");
  env.kill_service();
  EXPECT_EQ(ledger_outcome(env, "cb-restart-2"), "APPLIED");
  EXPECT_NE(env.db().scalar("SELECT step FROM operation WHERE operation_id = '" + crashing + "'"), "10012");
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + crashing +
                            "' AND actor = 'callback'"),
            "1");
  env.restart_service();
  // An at-least-once sender that missed our answer delivers again: DUPLICATE, and the operation is
  // driven on from its stored row (start-up rehydration does the same without the redelivery).
  EXPECT_EQ(outcome_of(post_signed_approval(env, body)), "DUPLICATE");
  auto c = env.wait_for_phase(crashing, "VALIDATED");
  ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  auto steps = timeline_steps(c);
  EXPECT_EQ(std::count(steps.begin(), steps.end(), "APPROVAL_APPROVED"), 1) << c.dump(2);
}
