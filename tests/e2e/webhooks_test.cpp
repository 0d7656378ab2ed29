// GitLab's own webhooks end to end: real MariaDB, changeflow-sim sending Pipeline, Merge Request
// and Deployment Hooks (GitLab's payloads and headers) for the projects it has a secret for, and
// changeflowd. Judged on the simulator's request log (what the service asked GitLab), the
// timelines (what moved) and the callback ledger (what was recorded).

#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"

#include <gtest/gtest.h>

#include <iostream>
#include <regex>

using namespace changeflow;
using namespace changeflow::testing;
using json = nlohmann::json;

namespace {

constexpr const char* hooked = "team/hooked";
constexpr const char* polled = "team/polled";
constexpr const char* hook_secret = "hooked-webhook-secret";

/// Two repositories side by side: only `team/hooked` has a webhook secret (and the sim sends hooks
/// only for it). Polls as flow_env's (fast), slowed to `webhook_interval_ms` for the hooked one.
json two_repositories(std::int64_t webhook_interval_ms) {
  return json{
      {"repositories",
       {{hooked, {{"branches", {"main"}}, {"webhook_secret", hook_secret}}}, {polled, {{"branches", {"main"}}}}}},
      {"poll", {{"webhook_interval_ms", webhook_interval_ms}}}};
}

std::vector<std::string> sim_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--projects",        std::string(hooked) + "=main;" + polled + "=main",
                                   "--webhook-url",     "{service}/api/v1/webhooks/gitlab",
                                   "--webhook-secrets", std::string(hooked) + "=" + hook_secret};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::string submit_to(flow_env& env, const std::string& repository, const std::string& title,
                      const std::string& target) {
  json body = {{"subject", "team-" + target},
               {"target", target},
               {"repository", repository},
               {"targetBranch", "main"},
               {"title", title},
               {"files", {{{"path", "config/" + target + ".yaml"}, {"content", "v: " + title + "\n"}}}}};
  auto r = http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump());
  EXPECT_EQ(r.status, 202) << r.body << r.error;
  auto j = r.json_body();
  return j.contains("data") ? j["data"].value("operationId", "") : "";
}

http_result post_hook(flow_env& env, const json& body, const std::string& event, const std::string& uuid,
                      const std::string& token = hook_secret) {
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Content-Type", "application/json"}, {"X-Gitlab-Event", event}, {"X-Gitlab-Event-UUID", uuid}};
  if (!token.empty()) headers.emplace_back("X-Gitlab-Token", token);
  return http_call("127.0.0.1", env.port(), "POST", "/api/v1/webhooks/gitlab", body.dump(), headers);
}

json pipeline_hook(const std::string& project, std::int64_t mr_iid, const std::string& sha, const std::string& status) {
  return {{"object_kind", "pipeline"},
          {"object_attributes", {{"id", 777001}, {"sha", sha}, {"status", status}, {"source", "merge_request_event"}}},
          {"merge_request", {{"iid", mr_iid}, {"state", "opened"}}},
          {"project", {{"id", 1}, {"path_with_namespace", project}}}};
}

json mr_hook(const std::string& project, std::int64_t mr_iid, const std::string& action) {
  return {{"object_kind", "merge_request"},
          {"object_attributes", {{"iid", mr_iid}, {"action", action}, {"state", "merged"}}},
          {"project", {{"id", 1}, {"path_with_namespace", project}}}};
}

/// GitLab reads of one project's MRs and pipelines in the simulator's request log.
int mr_reads(flow_env& env, const std::string& project) {
  auto log = json::parse(env.sim_call("GET", "/_sim/requests").body);
  int n = 0;
  for (const auto& e : log["requests"]) {
    const auto endpoint = e["endpoint"].get<std::string>();
    if (e["project"] == project &&
        (endpoint == "get_mr" || endpoint == "mr_pipelines" || endpoint == "get_pipeline" || endpoint == "list_mrs")) {
      ++n;
    }
  }
  return n;
}

double metric(flow_env& env, const std::string& name, const std::string& labels) {
  auto r = http_call("127.0.0.1", env.port(), "GET", "/metrics");
  const std::string selector = labels.empty() ? "(\\{\\})?" : "\\{" + labels + "\\}";
  std::regex line("^" + name + selector + " ([0-9.e+]+)$", std::regex::multiline);
  std::smatch m;
  if (!std::regex_search(r.body, m, line)) return 0;
  return std::stod(m[m.size() - 1].str());
}

std::string events_of(flow_env& env, const std::string& operation_id) {
  return env.db().scalar("SELECT GROUP_CONCAT(to_step ORDER BY id) FROM operation_event WHERE operation_id = '" +
                         operation_id + "'");
}

/// The MR head sha the simulator has for `iid`.
std::string mr_head(flow_env& env, const std::string& project, std::int64_t iid) {
  std::string encoded = std::regex_replace(project, std::regex("/"), "%2F");
  auto r = env.sim_call("GET", "/api/v4/projects/" + encoded + "/merge_requests/" + std::to_string(iid), "",
                        {{"PRIVATE-TOKEN", "author-token"}});
  return r.json_body().value("sha", "");
}

}  // namespace

// (1) The same flow with and without webhooks, side by side: the hooked change's waits end on the
// Pipeline Hook, so it reads GitLab less often than the polled one, whose every poll is a read.
TEST(GitlabWebhooks, AChangeNeedsFewerGitlabReadsWithWebhooks) {
  // A pipeline long enough for the polled change to poll several times (40 ms, then 200 ms).
  constexpr const char* jwt_secret = "webhooks-test-secret";
  auto config = two_repositories(30000);
  config["auth"] = {{"jwt_secret", jwt_secret}};
  flow_env env(config, sim_args({"--pipeline-duration-ms", "1500"}));
  auto with_hooks = submit_to(env, hooked, "hooked change", "svc-a");
  auto without = submit_to(env, polled, "polled change", "svc-b");
  for (const auto& id : {with_hooks, without}) {
    auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(90));
    ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  }
  const int hooked_reads = mr_reads(env, hooked);
  const int polled_reads = mr_reads(env, polled);
  std::cout << "GitLab MR/pipeline reads per change: with webhooks " << hooked_reads << ", without " << polled_reads
            << "\n";
  EXPECT_GT(hooked_reads, 0);
  EXPECT_LT(hooked_reads, polled_reads);
  // The hooks were what ended the waits (the slow poll is 30 s, far beyond this test's flow).
  EXPECT_GT(metric(env, "changeflow_callbacks_total", "kind=\"gitlab\",outcome=\"DELIVERED\""), 0);
  // The change page lists the hooks routed to the change beside its approval and deploy deliveries.
  auto page = http_call("127.0.0.1", env.port(), "GET", "/api/v1/ops/operations/" + with_hooks, "",
                        {{"Authorization", "Bearer " + mint_hs256(jwt_secret, "alice")}});
  ASSERT_EQ(page.status, 200) << page.body;
  int delivered_hooks = 0;
  const auto listed = page.json_body();
  for (const auto& c : listed["data"]["callbacks"])
    delivered_hooks += c["kind"] == "gitlab" && c["outcome"] == "DELIVERED";
  EXPECT_GT(delivered_hooks, 0) << page.body;
}

// (2) Redelivered, stale, foreign and forged hooks move nothing.
TEST(GitlabWebhooks, DuplicateOutOfOrderUnknownAndForgedHooksAreHarmless) {
  flow_env env(two_repositories(120000), sim_args({"--pipeline-duration-ms", "600"}));
  // The sim's own faults on a live flow (one rule fires per hook, the first that matches): the
  // "running" pipeline hook twice with one UUID, the final one followed by a stale "running", the
  // merge hook also for a project we do not serve, the deployment hook also with a forged token.
  const std::pair<const char*, const char*> rules[] = {{"pipeline_hook", "duplicate"},
                                                       {"pipeline_hook", "reorder"},
                                                       {"merge_request_hook", "unknown_project"},
                                                       {"deployment_hook", "forged"}};
  for (const auto& [endpoint, mode] : rules) {
    env.add_fault(
        {{"kind", "gitlab_webhook"}, {"endpoint", endpoint}, {"mode", mode}, {"match", "faulty"}, {"count", 1}});
  }
  auto faulty = submit_to(env, hooked, "faulty hooks change", "svc-f");
  auto c = env.wait_for_phase(faulty, "VALIDATED", std::chrono::seconds(90));
  ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  // Each step once: no hook made a step repeat.
  const auto events_of_validated = events_of(env, faulty);
  auto steps = timeline_steps(c);
  std::set<std::string> distinct(steps.begin(), steps.end());
  EXPECT_EQ(distinct.size(), steps.size()) << c.dump(2);
  // The forged copy follows the real deployment hook: wait until the sim has given up on it.
  EXPECT_TRUE(wait_until(
      [&] {
        return env.sim_call("GET", "/_sim/stats").json_body()["callbacks"].value("deployment_hook_forged_failed", 0) >
               0;
      },
      std::chrono::seconds(30)));
  EXPECT_GT(metric(env, "changeflow_callbacks_total", "kind=\"gitlab\",outcome=\"DUPLICATE\""), 0);
  EXPECT_GT(metric(env, "changeflow_callbacks_total", "kind=\"gitlab\",outcome=\"UNAUTHENTICATED\""), 0);
  EXPECT_GT(metric(env, "changeflow_callbacks_total", "kind=\"gitlab\",outcome=\"IGNORED\""), 0);
  EXPECT_EQ(events_of(env, faulty), events_of_validated);

  // A merge hook for the MR of a change that has ended: no actor waits on it, nothing moves.
  const auto faulty_events = events_of(env, faulty);
  auto late_merge =
      post_hook(env, mr_hook(hooked, c["mrIid"].get<std::int64_t>(), "merge"), "Merge Request Hook", "t-late-merge");
  EXPECT_EQ(late_merge.outcome(), "IGNORED") << late_merge.body;
  EXPECT_EQ(events_of(env, faulty), faulty_events);

  // The test's own hooks against a change waiting for a pipeline that never finishes.
  env.add_fault({{"kind", "pipeline_hang"}, {"match", "waiting change"}, {"count", 1}});
  auto waiting = submit_to(env, hooked, "waiting change", "svc-w");
  auto w = env.wait_for_step(waiting, "CREATE_MR_OPENED", std::chrono::seconds(60));
  ASSERT_EQ(w["step"]["name"], "CREATE_MR_OPENED") << w.dump(2);
  const auto iid = w["mrIid"].get<std::int64_t>();
  const auto head = mr_head(env, hooked, iid);
  ASSERT_FALSE(head.empty());
  const auto before = events_of(env, waiting);
  const int reads_before = mr_reads(env, hooked);

  // Forged, and missing: 401, nothing recorded.
  auto forged = post_hook(env, pipeline_hook(hooked, iid, head, "success"), "Pipeline Hook", "t-forged", "wrong");
  EXPECT_EQ(forged.status, 401) << forged.body;
  auto missing = post_hook(env, pipeline_hook(hooked, iid, head, "success"), "Pipeline Hook", "t-missing", "");
  EXPECT_EQ(missing.status, 401) << missing.body;
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM callback_ledger WHERE delivery_id IN ('gitlab:t-forged', "
                            "'gitlab:t-missing')"),
            "0");
  // A project we do not serve: 2xx IGNORED, nothing recorded.
  auto foreign = post_hook(env, pipeline_hook("someone/else", iid, head, "success"), "Pipeline Hook", "t-foreign");
  EXPECT_EQ(foreign.status, 200) << foreign.body;
  EXPECT_EQ(foreign.outcome(), "IGNORED");
  // A pipeline still running, and one of an old sha: nothing to end.
  auto running = post_hook(env, pipeline_hook(hooked, iid, head, "running"), "Pipeline Hook", "t-running");
  EXPECT_EQ(running.outcome(), "IGNORED") << running.body;
  auto old_sha = post_hook(env, pipeline_hook(hooked, iid, std::string(40, 'a'), "failed"), "Pipeline Hook", "t-old");
  EXPECT_EQ(old_sha.status, 200) << old_sha.body;
  // The same event again: DUPLICATE.
  auto again = post_hook(env, pipeline_hook(hooked, iid, head, "running"), "Pipeline Hook", "t-running");
  EXPECT_EQ(again.outcome(), "DUPLICATE") << again.body;
  // Recorded durably, by event UUID.
  EXPECT_EQ(env.db().scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'gitlab:t-running'"), "IGNORED");
  EXPECT_EQ(env.db().scalar("SELECT kind FROM callback_ledger WHERE delivery_id = 'gitlab:t-old'"), "gitlab");
  // Nothing moved: the timeline is as it was, and the old-sha failure did not fail the change.
  auto after = env.get_change(waiting);
  EXPECT_EQ(events_of(env, waiting), before);
  EXPECT_EQ(after["step"]["name"], "CREATE_MR_OPENED") << after.dump(2);
  // Nor did any of them make the actor read early: its slow poll is 120 s away.
  EXPECT_EQ(mr_reads(env, hooked), reads_before);
}

// (3) A lost hook is covered by the slow poll.
TEST(GitlabWebhooks, ALostHookIsCoveredByTheSlowPoll) {
  flow_env env(two_repositories(1500), sim_args({"--pipeline-duration-ms", "300"}));
  env.add_fault(
      {{"kind", "gitlab_webhook"}, {"endpoint", "pipeline_hook"}, {"mode", "drop"}, {"match", "lost"}, {"count", -1}});
  auto id = submit_to(env, hooked, "lost hooks change", "svc-l");
  auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(90));
  ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  auto stats = env.sim_call("GET", "/_sim/stats").json_body();
  EXPECT_GT(stats["callbacks"].value("pipeline_hook_dropped", 0), 0) << stats.dump();
  EXPECT_EQ(stats["callbacks"].value("pipeline_hook_sent", 0), 0) << stats.dump();
  // Every pipeline wait ended by a poll: no pipeline hook reached the service.
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM callback_ledger WHERE kind = 'gitlab' AND "
                            "JSON_UNQUOTE(JSON_EXTRACT(payload, '$.object_kind')) = 'pipeline'"),
            "0");
}

// (4) The Deployment Hook confirms or fails the deploy (no deploy callback in this run).
TEST(GitlabWebhooks, DeploymentHookValidatesOrFailsAMergedChange) {
  flow_env env(two_repositories(30000), sim_args({"--deploy-callback-url", ""}));
  env.add_fault({{"kind", "deploy_callback"}, {"mode", "failed"}, {"match", "broken deploy"}, {"count", 1}});
  auto good = submit_to(env, hooked, "good deploy", "svc-g");
  auto bad = submit_to(env, hooked, "broken deploy", "svc-x");
  auto g = env.wait_for_phase(good, "VALIDATED", std::chrono::seconds(90));
  ASSERT_EQ(g["phase"], "VALIDATED") << g.dump(2);
  EXPECT_TRUE(is_subsequence({"HANDLE_MERGED", "CALLED_BACK"}, timeline_steps(g))) << g.dump(2);
  auto b = env.wait_for_step(bad, "DEPLOY_FAILED", std::chrono::seconds(90));
  ASSERT_EQ(b["step"]["name"], "DEPLOY_FAILED") << b.dump(2);
  // Both through the deploy intake, recorded under the hooks' event UUIDs; no deploy callback ran.
  // The sim counts a hook as sent once its answer is back, which can be after the change moved.
  json stats;
  EXPECT_TRUE(wait_until(
      [&] {
        stats = env.sim_call("GET", "/_sim/stats").json_body();
        return stats["callbacks"].value("deployment_hook_sent", 0) >= 2;
      },
      std::chrono::seconds(30)))
      << stats.dump();
  EXPECT_EQ(stats["callbacks"].value("deployment_hook_sent", 0), 2) << stats.dump();
  EXPECT_EQ(stats["callbacks"].value("deploy_sent", 0), 0) << stats.dump();
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM deploy_callback WHERE project = 'team/hooked'"), "2");
}

// A batch MR's hooks go to the batch coordinator: its drive reads the MR when the pipeline
// finished instead of at its slow poll (30 s here), and the hook is recorded as DELIVERED.
TEST(GitlabWebhooks, BatchMrHooksWakeTheCoordinatorsDrive) {
  auto cfg = two_repositories(30000);
  cfg["batch"] = {{"enabled", true}, {"round_interval_ms", 100}};
  flow_env env(cfg, sim_args({"--pipeline-duration-ms", "800"}));
  auto a = submit_to(env, hooked, "batched one", "svc-b1");
  auto b = submit_to(env, hooked, "batched two", "svc-b2");
  for (const auto& id : {a, b}) {
    auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(120));
    ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
    EXPECT_TRUE(is_subsequence({"BATCH_WAITING", "BATCH_CLAIMED", "BATCH_MERGED"}, timeline_steps(c))) << c.dump(2);
  }
  // A final pipeline hook of a batch MR reached the coordinator.
  EXPECT_NE(env.db().scalar("SELECT COUNT(*) FROM callback_ledger WHERE kind = 'gitlab' AND outcome = 'DELIVERED' "
                            "AND JSON_UNQUOTE(JSON_EXTRACT(payload, '$.object_kind')) = 'pipeline' AND "
                            "JSON_UNQUOTE(JSON_EXTRACT(payload, '$.object_attributes.status')) = 'success'"),
            "0");
  EXPECT_GT(metric(env, "changeflow_webhook_wakes_total", ""), 0);
}
