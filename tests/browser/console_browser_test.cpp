// Drives the ops console in headless Chromium (playwright-core, /usr/bin/chromium) against a real
// changeflowd: overview -> stuck operation -> timeline -> re-trigger -> advance; and the stale-asset
// recovery (reload once, then a "Refresh page" button instead of a loop).

#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"

#include <gtest/gtest.h>
#include <jwt.h>

#include <sys/wait.h>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
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

std::string source_dir() {
  const char* s = std::getenv("CHANGEFLOW_SOURCE_DIR");
  return s ? s : "";
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
    env = std::make_unique<flow_env>(json{{"auth", {{"jwt_secret", jwt_secret}}},
                                          {"rate_limit", {{"ops", 100000}}},
                                          {"console", {{"dir", console_dir}}},
                                          {"poll", {{"timeout_ms", 800}}}});
  }

  int run_spec(const std::string& scenario, const std::vector<std::pair<std::string, std::string>>& vars) {
    std::string cmd = "cd " + quote(src) + " && env";
    std::vector<std::pair<std::string, std::string>> all = {
        {"CONSOLE_URL", "http://127.0.0.1:" + std::to_string(env->port()) + "/console/"},
        {"CONSOLE_DIR", console_dir},
        {"OPS_TOKEN", mint("alice")},
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
  std::unique_ptr<flow_env> env;
};

TEST_F(ConsoleBrowser, RetriggerAStuckPipelineFromTheOverview) {
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
  ASSERT_TRUE(env);
  EXPECT_EQ(run_spec("stale-asset", {}), 0);
}

}  // namespace
