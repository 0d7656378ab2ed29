// Ops API over real HTTP against the full environment (DB + sim + changeflowd): authorization
// (401/403 "Access denied"), actions along the operator edges, idempotency, refusals, and the audit
// log carrying the server-written operator.

#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"

#include <gtest/gtest.h>
#include <jwt.h>

#include <cstdlib>
#include <ctime>

using namespace changeflow::testing;
using json = nlohmann::json;

namespace {

constexpr const char* jwt_secret = "ops-test-secret";

std::string mint(const std::string& sub) {
  return changeflow::testing::mint_hs256(jwt_secret, sub, 600);
}

using headers = std::vector<std::pair<std::string, std::string>>;

headers as(const std::string& who, const std::string& idem_key = {}) {
  headers h = {{"Authorization", "Bearer " + mint(who)}, {"Content-Type", "application/json"}};
  if (!idem_key.empty()) h.push_back({"Idempotency-Key", idem_key});
  return h;
}

json body_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

json ops_config() {
  return json{
      {"auth", {{"jwt_secret", jwt_secret}}}, {"rate_limit", {{"ops", 100000}}}, {"poll", {{"timeout_ms", 800}}}};
}

std::string submit_hung(flow_env& env, const std::string& title, const std::string& target) {
  env.add_fault({{"kind", "pipeline_hang"}, {"match", title}});
  auto r = env.submit(title, "svc-owner", target);
  EXPECT_EQ(r.status, 202) << r.body;
  auto id = body_of(r)["data"]["operationId"].get<std::string>();
  auto c = env.wait_for_step(id, "CREATE_PIPELINE_PENDING");
  EXPECT_EQ(c["step"]["name"], "CREATE_PIPELINE_PENDING") << c.dump(2);
  return id;
}

http_result ops(flow_env& env, const std::string& method, const std::string& target, const headers& h,
                const std::string& body = {}) {
  return http_call("127.0.0.1", env.port(), method, target, body, h);
}

TEST(OpsApi, RefusedWithoutTheOpsPermission) {
  flow_env env(ops_config());
  // mallory holds no rule at the permission service; alice (unconfigured) holds every rule.
  auto grant =
      env.sim_call("POST", "/_sim/permissions", json{{"subject", "mallory"}, {"granted", json::array()}}.dump());
  ASSERT_EQ(grant.status, 200) << grant.body;
  for (std::string target :
       {"/api/v1/ops/operations", "/api/v1/ops/overview", "/api/v1/ops/audit", "/api/v1/ops/config",
        "/api/v1/ops/actors", "/api/v1/ops/instances", "/api/v1/ops/callbacks"}) {
    auto anonymous = ops(env, "GET", target, {});
    EXPECT_EQ(anonymous.status, 401) << target << " " << anonymous.body;
    auto denied = ops(env, "GET", target, as("mallory"));
    EXPECT_EQ(denied.status, 403) << target << " " << denied.body;
    EXPECT_EQ(body_of(denied)["message"], "Access denied") << target;
    auto allowed = ops(env, "GET", target, as("alice"));
    EXPECT_EQ(allowed.status, 200) << target << " " << allowed.body;
  }
  auto action = ops(env, "POST", "/api/v1/ops/operations/4a1f0c1e-0000-4000-8000-000000000001/fail", as("mallory"),
                    R"({"reason":"x"})");
  EXPECT_EQ(action.status, 403) << action.body;
  EXPECT_EQ(body_of(action)["message"], "Access denied");
}

TEST(OpsApi, ActionsFollowOperatorEdgesAreIdempotentAndAudited) {
  flow_env env(ops_config());
  auto id = submit_hung(env, "ops-hang-1", "svc-ops-1");

  // Detail: timeline, allowed actions from the transition table, live actor.
  auto detail = ops(env, "GET", "/api/v1/ops/operations/" + id, as("alice"));
  ASSERT_EQ(detail.status, 200) << detail.body;
  auto d = body_of(detail)["data"];
  EXPECT_EQ(d["step"]["name"], "CREATE_PIPELINE_PENDING");
  ASSERT_FALSE(d["allowedActions"].empty());
  EXPECT_EQ(d["allowedActions"][0]["action"], "retrigger");
  EXPECT_EQ(d["allowedActions"][0]["target"], "CREATE_MR_OPENED");
  EXPECT_GE(d["timeline"].size(), 3u);
  ASSERT_FALSE(d["live"].is_null()) << "the hung operation keeps an actor on this instance";
  // The actor answered for itself (asked without blocking a database worker), not only the registry.
  ASSERT_TRUE(d["live"]["snapshot"].is_object()) << d["live"].dump();
  EXPECT_EQ(d["live"]["snapshot"]["operationId"], id);
  EXPECT_EQ(d["live"]["snapshot"]["step"], "CREATE_PIPELINE_PENDING");
  // A waiting actor holds no step in memory: the step it shows is the row's.
  ASSERT_TRUE(d["live"]["snapshot"].contains("heldStep")) << d["live"].dump();
  EXPECT_TRUE(d["live"]["snapshot"]["heldStep"].is_null()) << d["live"].dump();

  // Listed across instances with a filter, and on the overview's stuck list.
  auto list = body_of(ops(env, "GET", "/api/v1/ops/operations?step=CREATE_PIPELINE_PENDING", as("alice")));
  ASSERT_EQ(list["data"]["items"].size(), 1u) << list.dump();
  EXPECT_EQ(list["data"]["items"][0]["operationId"], id);
  auto overview = body_of(ops(env, "GET", "/api/v1/ops/overview", as("alice")));
  ASSERT_FALSE(overview["data"]["stuck"].empty()) << overview.dump();
  EXPECT_EQ(overview["data"]["stuck"][0]["operationId"], id);

  // Refused when the state does not allow it, with a message naming the step.
  auto resend = ops(env, "POST", "/api/v1/ops/operations/" + id + "/resend-approval", as("alice"), "{}");
  EXPECT_EQ(resend.status, 409) << resend.body;
  EXPECT_NE(body_of(resend)["message"].get<std::string>().find("CREATE_PIPELINE_PENDING"), std::string::npos);

  // Re-trigger, trying to forge the operator: the server writes its own.
  std::string body = json{
      {"reason", "pipeline runner restarted"},
      {"__authenticatedOperator", "mallory"},
      {"expectedVersion",
       d["version"]}}.dump();
  auto first = ops(env, "POST", "/api/v1/ops/operations/" + id + "/retrigger", as("alice", "rt-1"), body);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(body_of(first)["data"]["to"], "CREATE_MR_OPENED");
  // The same key replays the first answer instead of acting again.
  auto again = ops(env, "POST", "/api/v1/ops/operations/" + id + "/retrigger", as("alice", "rt-1"), body);
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.header("idempotent-replayed"), "true");
  EXPECT_EQ(again.body, first.body);
  // Without the key, the stale expectedVersion refuses a second act.
  auto stale = ops(env, "POST", "/api/v1/ops/operations/" + id + "/retrigger", as("alice"), body);
  EXPECT_EQ(stale.status, 409) << stale.body;

  auto after = body_of(ops(env, "GET", "/api/v1/ops/operations/" + id, as("alice")))["data"];
  bool operator_edge = false;
  for (const auto& e : after["timeline"]) {
    if (e["from"] == "CREATE_PIPELINE_PENDING" && e["to"] == "CREATE_MR_OPENED" && e["actor"] == "operator:alice") {
      operator_edge = true;
    }
  }
  EXPECT_TRUE(operator_edge) << after["timeline"].dump(2);

  // Force a failure (reason required), then it is final: a second fail is refused.
  auto no_reason = ops(env, "POST", "/api/v1/ops/operations/" + id + "/fail", as("alice"), "{}");
  EXPECT_EQ(no_reason.status, 400) << no_reason.body;
  auto failed = ops(env, "POST", "/api/v1/ops/operations/" + id + "/fail", as("alice", "fail-1"),
                    R"({"reason":"abandon this change","token":"s3cr3t-value"})");
  ASSERT_EQ(failed.status, 200) << failed.body;
  EXPECT_EQ(body_of(failed)["data"]["to"], "FORCED_FAILED");
  auto c = env.get_change(id);
  EXPECT_EQ(c["phase"], "HANDLE_FAILED");
  auto twice = ops(env, "POST", "/api/v1/ops/operations/" + id + "/fail", as("alice"), R"({"reason":"again"})");
  EXPECT_EQ(twice.status, 409) << twice.body;

  // Every action is in the audit log with the server-written operator, params masked.
  auto audit = body_of(ops(env, "GET", "/api/v1/ops/audit?limit=100", as("alice")));
  std::map<std::string, int> seen;
  for (const auto& a : audit["data"]["items"]) {
    if (a["target"] != id) continue;
    EXPECT_EQ(a["operator"], "alice") << a.dump();
    EXPECT_EQ(a["params"]["__authenticatedOperator"], "alice") << a.dump();
    EXPECT_EQ(a.dump().find("mallory"), std::string::npos) << a.dump();
    EXPECT_EQ(a.dump().find("s3cr3t-value"), std::string::npos) << "secret-looking params are masked: " << a.dump();
    seen[a["action"].get<std::string>() + ":" + a["outcome"].get<std::string>()]++;
  }
  EXPECT_EQ(seen["retrigger:OK"], 1) << audit.dump(2);
  EXPECT_GE(seen["retrigger:STALE"], 1);
  EXPECT_EQ(seen["resend-approval:REFUSED"], 1);
  EXPECT_EQ(seen["fail:OK"], 1);
  EXPECT_EQ(seen["fail:REFUSED"], 1);
}

TEST(OpsApi, BulkDryRunCountsAndBulkFailActs) {
  flow_env env(ops_config());
  auto a = submit_hung(env, "ops-bulk-a", "svc-bulk-a");
  auto b = submit_hung(env, "ops-bulk-b", "svc-bulk-b");
  json filter = {{"step", "CREATE_PIPELINE_PENDING"}};
  auto dry = ops(env, "POST", "/api/v1/ops/bulk/fail", as("alice"), json{{"filter", filter}, {"dryRun", true}}.dump());
  ASSERT_EQ(dry.status, 200) << dry.body;
  EXPECT_EQ(body_of(dry)["data"]["eligible"], 2);
  EXPECT_EQ(env.get_change(a)["step"]["name"], "CREATE_PIPELINE_PENDING") << "a dry run changes nothing";
  auto unfiltered = ops(env, "POST", "/api/v1/ops/bulk/fail", as("alice"), R"({"dryRun":false,"reason":"x"})");
  EXPECT_EQ(unfiltered.status, 400) << unfiltered.body;
  auto real = ops(env, "POST", "/api/v1/ops/bulk/fail", as("alice"),
                  json{{"filter", filter}, {"dryRun", false}, {"reason", "incident 42"}}.dump());
  ASSERT_EQ(real.status, 200) << real.body;
  EXPECT_EQ(body_of(real)["data"]["outcomes"]["OK"], 2) << real.body;
  EXPECT_EQ(env.get_change(a)["step"]["name"], "FORCED_FAILED");
  EXPECT_EQ(env.get_change(b)["step"]["name"], "FORCED_FAILED");
}

}  // namespace

// The console's polling cannot lock an operator out of acting: reads and actions are counted in
// separate buckets, so an operator whose reads hit their limit still gets actions through.
TEST(OpsApi, ReadsOverTheirLimitLeaveActionsAvailable) {
  auto cfg = ops_config();
  cfg["rate_limit"] = {{"ops_read", 3}, {"ops", 100000}, {"window_ms", 600000}};
  flow_env env(cfg);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ops(env, "GET", "/api/v1/ops/overview", as("alice")).status, 200) << i;
  auto refused = ops(env, "GET", "/api/v1/ops/overview", as("alice"));
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_FALSE(refused.header("retry-after").empty());
  auto action = ops(env, "POST", "/api/v1/ops/operations/4a1f0c1e-0000-4000-8000-000000000002/fail", as("alice"),
                    R"({"reason":"still allowed"})");
  EXPECT_EQ(action.status, 404) << "an action is judged on its own, not refused by the read quota: " << action.body;
}
