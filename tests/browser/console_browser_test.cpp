// Drives the ops console in headless Chromium (playwright-core, /usr/bin/chromium) against a real
// changeflowd, MariaDB and the simulator: needs-attention -> stuck change -> timeline -> re-trigger;
// the attention view's reasons; a change page after injected 503s; three polling tabs; honest
// actions (a warned re-trigger, an audited refusal); the stale-asset recovery. Each scenario writes
// screenshots of its pages into tmp/ under the test's build directory.

#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"

#include "base/ids.hpp"

#include <gtest/gtest.h>
#include <jwt.h>

#include <sys/wait.h>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>

using namespace changeflow::testing;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* jwt_secret = "browser-test-secret";
constexpr const char* chromium = "/usr/bin/chromium";

std::string mint(const std::string& sub) {
  return changeflow::testing::mint_hs256(jwt_secret, sub, 3600);
}

/// Runs a shell command, returns (exit status, combined output).
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Prerequisites: each missing one fails the test with what to do about it.
void require_toolchain(const std::string& src) {
  ASSERT_FALSE(src.empty()) << "CHANGEFLOW_SOURCE_DIR is not set (run through ctest)";
  ASSERT_EQ(run("command -v node").first, 0) << "node is missing: run scripts/setup (Debian nodejs npm chromium)";
  ASSERT_TRUE(fs::exists(chromium)) << chromium << " is missing: run scripts/setup (Debian chromium)";
  ASSERT_TRUE(fs::exists(src + "/console/node_modules/playwright-core"))
      << "playwright-core is missing: run scripts/build-console (npm install in console/)";
  ASSERT_TRUE(fs::exists(src + "/console/dist/index.html")) << "console/dist is missing: run scripts/build-console";
}

class ConsoleBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    src = source_dir();
    require_toolchain(src);
    if (HasFatalFailure()) return;
    // A private copy of the build: the stale-asset scenario deletes files from it.
    console_dir = make_temp_dir("cf-console-copy") + "/dist";
    fs::copy(src + "/console/dist", console_dir, fs::copy_options::recursive);
    shot_dir = (fs::current_path() / "tmp").string();
  }

  /// The environment every scenario runs against; `extra` and `sim_args` on top of the defaults.
  void start(const json& extra = json::object(), const std::vector<std::string>& sim_args = {}) {
    json config = {{"auth", {{"jwt_secret", jwt_secret}}},
                   {"rate_limit", {{"ops", 100000}, {"ops_read", 100000}}},
                   {"console", {{"dir", console_dir}, {"poll_ms", 1000}}},
                   {"poll", {{"timeout_ms", 800}}}};
    changeflow::testing::merge_json(config, extra);
    env = std::make_unique<flow_env>(config, sim_args);
  }

  std::string submit_ok(const std::string& title, const std::string& target) {
    auto r = env->submit(title, "svc-owner", target);
    EXPECT_EQ(r.status, 202) << r.body;
    auto j = json::parse(r.body, nullptr, false);
    return j.is_discarded() ? std::string() : j["data"]["operationId"].get<std::string>();
  }

  int run_spec(const std::string& scenario, const std::vector<std::pair<std::string, std::string>>& vars) {
    std::string cmd = "cd " + quote(src) + " && env";
    std::vector<std::pair<std::string, std::string>> all = {
        {"CONSOLE_URL", "http://127.0.0.1:" + std::to_string(env->port()) + "/console/"},
        {"CONSOLE_DIR", console_dir},
        {"OPS_TOKEN", mint("alice")},
        {"SHOT_DIR", shot_dir},
        {"SCENARIO", scenario}};
    all.insert(all.end(), vars.begin(), vars.end());
    for (const auto& [k, v] : all) cmd += " " + k + "=" + quote(v);
    cmd += " node tests/browser/console.spec.mjs";
    auto [status, out] = run(cmd);
    std::cout << out;
    return status;
  }

  std::string src;
  std::string console_dir;
  std::string shot_dir;
  std::unique_ptr<flow_env> env;
};

/// A failure (the approval system refuses the submission), an approval left unanswered past
/// ops.attention_approval_after_s, a deploy result for an MR nobody has and an approval decision for
/// the failed change (both ignored as stale). The simulated approver never decides.
struct attention_scene {
  std::string failed, waiting, deploy_delivery = "browser-deploy-1", approval_delivery = "browser-approval-1";
};
attention_scene make_attention_scene(flow_env& env,
                                     const std::function<std::string(std::string, std::string)>& submit) {
  attention_scene s;
  env.add_fault({{"kind", "status"}, {"endpoint", "approval_submit"}, {"status", 422}, {"match", "browser-refused"}});
  s.failed = submit("browser-refused change", "svc-b-1");
  EXPECT_EQ(env.wait_for_step(s.failed, "APPROVAL_SUBMIT_FAILED")["step"]["name"], "APPROVAL_SUBMIT_FAILED");
  s.waiting = submit("browser-waiting change", "svc-b-2");
  EXPECT_EQ(env.wait_for_step(s.waiting, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  auto deploy = http_call(
      "127.0.0.1", env.port(), "POST", "/api/v1/callbacks/deploy",
      json{{"deliveryId", s.deploy_delivery}, {"project", "config/changes"}, {"mrIid", 424242}, {"status", "success"}}
          .dump(),
      {{"Content-Type", "application/json"}, {"X-Gitlab-Token", "demo-deploy-secret"}});
  EXPECT_EQ(deploy.status, 200) << deploy.body;
  auto body = json{{"callbackId", s.approval_delivery},
                   {"approvalId", "apr-b"},
                   {"operationId", s.failed},
                   {"result", "APPROVED"},
                   {"approver", "tester"},
                   {"ext", json::object()}}
                  .dump();
  auto approval =
      http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/approval", body,
                {{"Content-Type", "application/json"},
                 {"X-Signature", "sha256=" + changeflow::ids::hmac_sha256_hex("demo-approval-secret", body)}});
  EXPECT_EQ(approval.status, 200) << approval.body;
  return s;
}

const std::vector<std::string> approver_never_decides = {"--callback-delay-ms", "600000"};

TEST_F(ConsoleBrowser, RetriggerAStuckPipelineFromTheAttentionView) {
  start();
  ASSERT_TRUE(env);
  env->add_fault({{"kind", "pipeline_hang"}, {"match", "browser-hang-1"}});
  auto r = env->submit("browser-hang-1", "svc-owner", "svc-browser");
  ASSERT_EQ(r.status, 202) << r.body;
  auto id = json::parse(r.body)["data"]["operationId"].get<std::string>();
  ASSERT_EQ(env->wait_for_step(id, "CREATE_PIPELINE_PENDING")["step"]["name"], "CREATE_PIPELINE_PENDING");
  // Clear the fault (the operator "fixed the runner") before re-triggering.
  auto cleared = env->sim_call("DELETE", "/_sim/faults");
  ASSERT_EQ(cleared.status, 200) << cleared.body;
  EXPECT_EQ(run_spec("retrigger", {{"OP_ID", id}}), 0);
  // The server agrees with what the browser saw: the operator edge is on the timeline.
  auto c = env->get_change(id);
  bool operator_edge = false;
  for (const auto& e : c["timeline"]) {
    operator_edge |=
        e["from"] == "CREATE_PIPELINE_PENDING" && e["to"] == "CREATE_MR_OPENED" && e["actor"] == "operator:alice";
  }
  EXPECT_TRUE(operator_edge) << c.dump(2);
}

TEST_F(ConsoleBrowser, StaleAssetReloadsOnceThenOffersRefresh) {
  start();
  ASSERT_TRUE(env);
  EXPECT_EQ(run_spec("stale-asset", {}), 0);
}

TEST_F(ConsoleBrowser, AttentionViewListsFailureOverdueApprovalAndUnappliedCallbacks) {
  start({{"ops", {{"attention_approval_after_s", 1}}}}, approver_never_decides);
  ASSERT_TRUE(env);
  auto scene = make_attention_scene(*env, [this](std::string t, std::string g) { return submit_ok(t, g); });
  EXPECT_EQ(run_spec("attention", {{"FAILED_ID", scene.failed},
                                   {"WAITING_ID", scene.waiting},
                                   {"DELIVERY_ID", scene.deploy_delivery},
                                   {"APPROVAL_DELIVERY_ID", scene.approval_delivery}}),
            0);
}

TEST_F(ConsoleBrowser, ChangePageShowsRetriesDurationsAndEveryCallback) {
  start();
  ASSERT_TRUE(env);
  env->add_fault(
      {{"kind", "status"}, {"endpoint", "create_mr"}, {"status", 503}, {"match", "browser-503"}, {"count", 2}});
  auto id = submit_ok("browser-503 change", "svc-b-503");
  ASSERT_EQ(env->wait_for_phase(id, "VALIDATED")["phase"], "VALIDATED");
  // The simulator served exactly the two 503s the page is expected to report.
  auto log = json::parse(env->sim_call("GET", "/_sim/requests").body, nullptr, false);
  int served = 0;
  for (const auto& r : log["requests"]) served += r["endpoint"] == "create_mr" && r["status"] == 503;
  ASSERT_EQ(served, 2);
  EXPECT_EQ(run_spec("change-page", {{"OP_ID", id}}), 0);
}

TEST_F(ConsoleBrowser, ThreeTabsPollWithinTheReadLimitAndAnActionIsAccepted) {
  // One read per refresh at 1 s in three tabs fits 60 reads per 10 s; actions have their own 5.
  start({{"rate_limit", {{"window_ms", 10000}, {"ops_read", 60}, {"ops", 5}}},
         {"ops", {{"attention_approval_after_s", 1}}}},
        approver_never_decides);
  ASSERT_TRUE(env);
  auto waiting = submit_ok("browser-tabs change", "svc-b-tabs");
  ASSERT_EQ(env->wait_for_step(waiting, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  EXPECT_EQ(run_spec("tabs", {{"WAITING_ID", waiting}}), 0);
  // The server agrees: the change was force-failed by alice with the reason she typed.
  auto c = env->get_change(waiting);
  EXPECT_EQ(c["step"]["name"], "FORCED_FAILED") << c.dump(2);
}

TEST_F(ConsoleBrowser, HonestActionsWarnAndAuditRefusals) {
  start();
  ASSERT_TRUE(env);
  env->add_fault({{"kind", "pipeline_fail"}, {"match", "browser-pipefail"}});
  auto id = submit_ok("browser-pipefail change", "svc-b-pipe");
  ASSERT_EQ(env->wait_for_step(id, "CREATE_PIPELINE_FAILED")["step"]["name"], "CREATE_PIPELINE_FAILED");
  EXPECT_EQ(run_spec("actions", {{"PIPELINE_FAILED_ID", id}}), 0);
  // Closed once (from the side), the console's stale close refused and nothing else written.
  auto c = env->get_change(id);
  EXPECT_EQ(c["step"]["name"], "CLOSE_SUCCEEDED") << c.dump(2);
  int closes = 0;
  for (const auto& e : c["timeline"]) closes += e["to"] == "CLOSE_SUCCEEDED";
  EXPECT_EQ(closes, 1) << c.dump(2);
}

TEST_F(ConsoleBrowser, ListsForTriageAndABulkActionCountedFirst) {
  start();
  ASSERT_TRUE(env);
  auto done = submit_ok("browser-list-done change", "svc-b-list-1");
  ASSERT_EQ(env->wait_for_phase(done, "VALIDATED")["phase"], "VALIDATED");
  env->add_fault({{"kind", "pipeline_hang"}, {"match", "browser-list-hang"}});
  auto a = submit_ok("browser-list-hang change a", "svc-b-list-2");
  auto b = submit_ok("browser-list-hang change b", "svc-b-list-3");
  for (const auto& id : {a, b})
    ASSERT_EQ(env->wait_for_step(id, "CREATE_PIPELINE_PENDING")["step"]["name"], "CREATE_PIPELINE_PENDING");
  EXPECT_EQ(run_spec("lists", {{"DONE_ID", done}, {"HANG_A", a}, {"HANG_B", b}}), 0);
  // The server agrees: the bulk re-trigger moved both waiting changes, as alice, and not the ended one.
  for (const auto& id : {a, b}) {
    auto c = env->get_change(id);
    int retriggers = 0;
    for (const auto& e : c["timeline"])
      retriggers += e["from"] == "CREATE_PIPELINE_PENDING" && e["actor"] == "operator:alice";
    EXPECT_EQ(retriggers, 1) << c.dump(2);
  }
  EXPECT_EQ(env->get_change(done)["phase"], "VALIDATED");
}

TEST_F(ConsoleBrowser, NotificationsPageShowsAFailingSubscribersDeliveries) {
  start({{"notifications", {{"dispatch_interval_ms", 100}, {"retry_base_ms", 200}, {"retry_cap_ms", 1000}}}});
  ASSERT_TRUE(env);
  // A subscriber that always answers 404 (a path changeflowd does not serve): nothing is delivered.
  const std::string url = "http://127.0.0.1:" + std::to_string(env->port()) + "/no-such-subscriber";
  auto created = http_call("127.0.0.1", env->port(), "POST", "/api/v1/subscriptions",
                           json{{"subject", "svc-owner"}, {"url", url}, {"secret", "browser-subscriber-secret"}}.dump(),
                           {{"Content-Type", "application/json"}});
  ASSERT_EQ(created.status, 201) << created.body;
  auto id = submit_ok("browser-notify change", "svc-b-notify");
  ASSERT_EQ(env->wait_for_phase(id, "VALIDATED")["phase"], "VALIDATED");
  EXPECT_EQ(run_spec("notifications", {{"OP_ID", id}}), 0);
}

TEST_F(ConsoleBrowser, PreviewShowsTheDiffAndWritesNothing) {
  start();
  ASSERT_TRUE(env);
  EXPECT_EQ(run_spec("preview", {}), 0);
  // Nothing was written: no change row, no GitLab write in the simulator's log.
  EXPECT_EQ(env->db().scalar("SELECT COUNT(*) FROM operation"), "0");
  auto log = json::parse(env->sim_call("GET", "/_sim/requests").body, nullptr, false);
  int file_reads = 0, writes = 0;
  for (const auto& r : log["requests"]) {
    file_reads += r["endpoint"] == "get_file";
    writes += r["endpoint"] == "create_commit" || r["endpoint"] == "create_mr" || r["endpoint"] == "update_mr" ||
              r["endpoint"] == "approve" || r["endpoint"] == "merge";
  }
  EXPECT_GE(file_reads, 1) << log.dump();
  EXPECT_EQ(writes, 0) << log.dump();
}

}  // namespace
