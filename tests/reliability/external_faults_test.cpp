// External systems slow, down or lying, end to end against
// changeflowd + changeflow-sim + MariaDB. Faults come from the simulator (sim/faults.hpp: slow
// beyond the client timeout, 5xx bursts, 429 + Retry-After, lost responses, garbage) or from the
// simulator being stopped (connections refused). For each: the operation completes once the fault
// ends, or ends in an explicit failure step; the breaker metric opens and closes; /healthz and
// GET /api/v1/changes/{id} keep answering throughout (each call bounded by the client's timeout).
// No sleeps: every wait is a wait_until on an observable condition.

#include "base/ids.hpp"
#include "tests/support/flow_env.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <regex>
#include <sstream>

using namespace changeflow::testing;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

/// Short client budgets so a slow system is "beyond the timeout" quickly.
json fault_config(json extra = json::object()) {
  json c = {{"external",
             {{"request_timeout_ms", 400},
              {"connect_timeout_ms", 300},
              {"breaker_failures", 3},
              {"breaker_cooldown_ms", 1500}}}};
  merge_json(c, extra);
  return c;
}

/// Value of one Prometheus sample (-1 when absent or /metrics does not answer).
double metric(flow_env& env, const std::string& name, const std::string& labels) {
  auto r = http_call("127.0.0.1", env.port(), "GET", "/metrics", {}, {}, 2s);
  std::regex line("^" + name + "\\{" + labels + "\\} ([0-9.e+-]+)$", std::regex::multiline);
  std::smatch m;
  if (r.status != 200 || !std::regex_search(r.body, m, line)) return -1;
  return std::stod(m[1].str());
}

double breaker(flow_env& env, const std::string& system) {
  return metric(env, "changeflow_breaker_state", "system=\"" + system + "\"");
}

/// The API stays responsive: each call returns within the client's 2 s bound, health is 200 and the
/// operation is readable. Counted so a test can assert it probed during the fault.
struct responsiveness {
  int probes = 0;
  int failures = 0;
  std::string last_failure;
  void probe(flow_env& env, const std::string& operation_id) {
    ++probes;
    auto h = http_call("127.0.0.1", env.port(), "GET", "/healthz", {}, {}, 2s);
    auto g = http_call("127.0.0.1", env.port(), "GET", "/api/v1/changes/" + operation_id, {}, {}, 2s);
    if (h.status != 200 || g.status != 200) {
      ++failures;
      last_failure = "healthz " + std::to_string(h.status) + " " + h.error + "; change " + std::to_string(g.status) +
                     " " + g.error;
    }
  }
};

std::string submit_ok(flow_env& env, const std::string& title, const std::string& target) {
  auto r = env.submit(title, "faults-user", target);
  EXPECT_EQ(r.status, 202) << r.body << r.error;
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("data")) return {};
  return j["data"]["operationId"].get<std::string>();
}

json sim_stats(flow_env& env) {
  auto r = env.sim_call("GET", "/_sim/stats");
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

long sim_requests(flow_env& env, const std::string& endpoint) {
  auto s = sim_stats(env);
  if (!s.contains("requests") || !s["requests"].contains(endpoint)) return 0;
  return s["requests"][endpoint].get<long>();
}

/// Waits for `cond` while probing the API's responsiveness on every round.
bool wait_probing(flow_env& env, const std::string& id, responsiveness& resp, const std::function<bool()>& cond,
                  std::chrono::milliseconds timeout) {
  return wait_until(
      [&] {
        resp.probe(env, id);
        return cond();
      },
      timeout);
}

/// POSTs an APPROVED decision signed like the approval system (default secret): the tests that
/// keep the sim from deciding by itself decide when the fault has been observed.
http_result approve(flow_env& env, const std::string& operation_id, const std::string& callback_id) {
  auto body = json{
      {"callbackId", callback_id},
      {"approvalId", "apr-test"},
      {"operationId", operation_id},
      {"result", "APPROVED"},
      {"approver",
       "tester"}}.dump();
  return http_call("127.0.0.1", env.port(), "POST", "/api/v1/callbacks/approval", body,
                   {{"X-Signature", "sha256=" + changeflow::ids::hmac_sha256_hex("demo-approval-secret", body)}});
}

/// Sum of the samples of `name` whose label set contains every fragment of `must_contain`.
double metric_sum(flow_env& env, const std::string& name, const std::vector<std::string>& must_contain) {
  auto r = http_call("127.0.0.1", env.port(), "GET", "/metrics", {}, {}, 2s);
  double total = 0;
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const auto& f : must_contain) all = all && line.find(f) != std::string::npos;
    if (all) total += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return total;
}

const std::vector<std::string> no_sim_decision = {"--callback-delay-ms", "600000"};

/// The operation explains itself: a named step, a phase and a hint.
void expect_explained(const json& change, const std::string& context) {
  EXPECT_TRUE(change.contains("step") && change["step"]["name"].is_string() &&
              !change["step"]["name"].get<std::string>().empty())
      << context << ": " << change.dump();
  EXPECT_TRUE(change.contains("hint") && change["hint"].is_string() && !change["hint"].get<std::string>().empty())
      << context << ": " << change.dump();
}

}  // namespace

// The approval system answers far beyond the client timeout: every call is cut at the budget, the
// breaker opens after 3 timeouts, a trial after the cool-down, and once the system is fast again the
// operation finishes and the breaker closes.
TEST(ExternalFaults, SlowApprovalSystemTimesOutOpensBreakerThenCompletes) {
  // The sim does not decide by itself: a slow submission still registers the approval, and its
  // decision would otherwise end the retries before the breaker could open.
  flow_env env(fault_config(), no_sim_decision);
  env.add_fault(
      {{"kind", "slow"}, {"endpoint", "approval_submit"}, {"delay_ms", 3000}, {"match", "slowpoke"}, {"count", 4}});
  auto id = submit_ok(env, "slowpoke", "svc-slow");
  ASSERT_FALSE(id.empty());
  responsiveness resp;
  ASSERT_TRUE(wait_probing(
      env, id, resp, [&] { return breaker(env, "approval") == 1; }, 30s))
      << "the approval breaker opens after consecutive timeouts: " << sim_stats(env).dump();
  auto waiting = env.get_change(id);
  EXPECT_EQ(waiting["step"]["name"], "APPROVAL_SENDING") << waiting.dump();
  expect_explained(waiting, "while the approval system is slow");
  ASSERT_TRUE(wait_probing(
      env, id, resp, [&] { return env.get_change(id)["step"]["name"] == "APPROVAL_SENT"; }, 60s))
      << env.get_change(id).dump();
  EXPECT_TRUE(wait_until([&] { return breaker(env, "approval") == 0; }, 10s)) << "the breaker closes again";
  ASSERT_EQ(approve(env, id, "cb-slow-1").status, 200);
  EXPECT_EQ(env.wait_for_phase(id, "VALIDATED")["phase"], "VALIDATED");
  EXPECT_EQ(resp.failures, 0) << resp.last_failure;
  EXPECT_GT(resp.probes, 0);
  EXPECT_GE(sim_requests(env, "approval_submit"), 4) << "every slow call was given up and retried";
  // Every call ended within its budget (request timeout 400 ms; the sim answered after 3 s): the
  // latency histogram has all submit_approval calls at or below the 1 s bucket.
  double calls = metric_sum(env, "changeflow_external_call_seconds_count", {"call=\"submit_approval\""});
  double within = metric_sum(env, "changeflow_external_call_seconds_bucket", {"call=\"submit_approval\"", "le=\"1\""});
  EXPECT_GE(calls, 4);
  EXPECT_EQ(within, calls) << "an approval call outlived its timeout";
}

// GitLab fails on the MR path: a 5xx burst (opens the gitlab breaker), more 5xx on MR creation, and
// a lost response after the MR was created (the retry must find it, not fail or duplicate it). The
// operation finishes; the breaker closes.
TEST(ExternalFaults, GitlabBurstsAndLostResponsesAreRetriedToCompletion) {
  flow_env env(fault_config(), no_sim_decision);
  // Consecutive failures open the breaker; the MR path starts by reading the change's file on the
  // target (get_file: its base), so the burst is put there (a 5xx on a later call alone alternates
  // with successful earlier calls and never opens it).
  env.add_fault({{"kind", "status"}, {"endpoint", "get_file"}, {"status", 502}, {"count", 5}});
  env.add_fault({{"kind", "status"}, {"endpoint", "create_mr"}, {"status", 503}, {"match", "bursty"}, {"count", 2}});
  env.add_fault({{"kind", "lose_response"}, {"endpoint", "create_mr"}, {"match", "bursty"}, {"count", 1}});
  auto id = submit_ok(env, "bursty", "svc-bursty");
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(env.wait_for_step(id, "APPROVAL_SENT")["step"]["name"], "APPROVAL_SENT");
  ASSERT_EQ(approve(env, id, "cb-bursty-1").status, 200);
  responsiveness resp;
  ASSERT_TRUE(wait_probing(
      env, id, resp, [&] { return breaker(env, "gitlab") == 1; }, 30s))
      << "the gitlab breaker opens during the 5xx burst: " << sim_stats(env).dump();
  expect_explained(env.get_change(id), "during the burst");
  ASSERT_TRUE(wait_probing(
      env, id, resp, [&] { return env.get_change(id)["phase"] == "VALIDATED"; }, 60s))
      << env.get_change(id).dump();
  EXPECT_TRUE(wait_until([&] { return breaker(env, "gitlab") == 0; }, 10s));
  EXPECT_EQ(resp.failures, 0) << resp.last_failure;
  auto fired = sim_stats(env)["faults_fired"];
  EXPECT_FALSE(fired.empty()) << sim_stats(env).dump();
  // Exactly one MR for the operation despite the lost response.
  auto mrs = env.sim_call("GET", "/api/v4/projects/config%2Fchanges/merge_requests?state=all", {},
                          {{"PRIVATE-TOKEN", "author-token"}});
  auto list = json::parse(mrs.body, nullptr, false);
  ASSERT_TRUE(list.is_array()) << mrs.body;
  int mine = 0;
  for (const auto& mr : list) {
    if (mr.contains("title") && mr["title"].get<std::string>().find("bursty") != std::string::npos) ++mine;
  }
  EXPECT_EQ(mine, 1) << "the lost create response did not produce a second MR";
}

// 429 with Retry-After: the next call waits at least that long. Asserted as a LOWER bound on the
// gap between the two requests the sim counts (a slow machine only makes the gap longer, so this
// cannot flake); the normal retry interval here is 40 ms, fifty times shorter than Retry-After.
TEST(ExternalFaults, RetryAfterOf429IsHonoured) {
  flow_env env(fault_config({{"external", {{"breaker_failures", 100}}}}));
  env.add_fault({{"kind", "status"},
                 {"endpoint", "approval_submit"},
                 {"status", 429},
                 {"retry_after", 2},
                 {"match", "patient"},
                 {"count", 1}});
  auto id = submit_ok(env, "patient", "svc-patient");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(wait_until([&] { return sim_requests(env, "approval_submit") >= 1; }, 10s));
  auto first_seen = std::chrono::steady_clock::now();
  responsiveness resp;
  ASSERT_TRUE(wait_probing(
      env, id, resp, [&] { return sim_requests(env, "approval_submit") >= 2; }, 20s));
  auto second_seen = std::chrono::steady_clock::now();
  EXPECT_GE(second_seen - first_seen, 1500ms) << "the retry came before Retry-After (2 s) had passed";
  EXPECT_EQ(sim_requests(env, "approval_submit"), 2) << "one refused call, one successful retry";
  EXPECT_EQ(env.wait_for_phase(id, "VALIDATED")["phase"], "VALIDATED");
  EXPECT_EQ(resp.failures, 0) << resp.last_failure;
}

// The simulator is stopped: every call is refused at connect. A waiting operation gives up at
// poll.timeout_ms with an explicit failure step (never stuck); the breakers open; the API answers
// throughout. The simulator comes back on the same port: new operations complete and the breaker
// closes.
TEST(ExternalFaults, RefusedConnectionsFailExplicitlyAndRecoveryClosesTheBreaker) {
  flow_env env(fault_config({{"poll", {{"timeout_ms", 4000}}}, {"external", {{"breaker_cooldown_ms", 500}}}}));
  auto sim_port = env.sim().port();
  ASSERT_GE(env.sim().process().stop(SIGTERM, 10s), 0) << "the simulator stops";
  auto id = submit_ok(env, "refused", "svc-refused");
  ASSERT_FALSE(id.empty());
  responsiveness resp;
  ASSERT_TRUE(wait_probing(
      env, id, resp, [&] { return breaker(env, "approval") == 1; }, 30s));
  ASSERT_TRUE(wait_probing(
      env, id, resp, [&] { return env.get_change(id)["step"]["name"] == "APPROVAL_SUBMIT_FAILED"; }, 30s))
      << env.get_change(id).dump();
  auto failed = env.get_change(id);
  expect_explained(failed, "explicit failure");
  EXPECT_NE(failed["phase"], "VALIDATED");
  // The actor stops once its failure is committed; it leaves the registry a moment after that.
  EXPECT_TRUE(wait_until([&] { return env.get_change(id)["live"] == false; }, 10s))
      << "a failed operation is not left running";
  auto steps = timeline_steps(failed);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back(), "APPROVAL_SUBMIT_FAILED");
  EXPECT_NE(failed["timeline"].back()["cause"].get<std::string>().find("unreachable"), std::string::npos)
      << "the timeline says why: " << failed["timeline"].back().dump();
  EXPECT_EQ(resp.failures, 0) << resp.last_failure;

  // The simulator returns on the same port (a fresh one: no state from before).
  std::string base = "http://127.0.0.1:" + std::to_string(env.port());
  auto dir = make_temp_dir("cf-faults-sim2");
  sim_process revived(dir,
                      {"--port", std::to_string(sim_port), "--deploy-callback-url", base + "/api/v1/callbacks/deploy",
                       "--callback-delay-ms", "30", "--pipeline-duration-ms", "60", "--rebase-duration-ms", "30"});
  ASSERT_EQ(revived.port(), sim_port);
  auto next = submit_ok(env, "after recovery", "svc-recovered");
  ASSERT_TRUE(wait_probing(
      env, next, resp, [&] { return env.get_change(next)["phase"] == "VALIDATED"; }, 60s))
      << env.get_change(next).dump();
  EXPECT_TRUE(wait_until([&] { return breaker(env, "approval") == 0 && breaker(env, "gitlab") == 0; }, 10s));
  EXPECT_EQ(env.get_change(id)["step"]["name"], "APPROVAL_SUBMIT_FAILED") << "a failed operation stays failed";
  EXPECT_EQ(resp.failures, 0) << resp.last_failure;
}

// GitLab lies: a 200 whose body is not JSON when the MR is read. The operation does not hang or
// guess: it ends in an explicit failure step whose timeline cause says what went wrong.
TEST(ExternalFaults, GarbageAnswersEndInAnExplicitFailure) {
  flow_env env(fault_config());
  env.add_fault({{"kind", "garbage"}, {"endpoint", "get_mr"}, {"count", -1}});
  auto id = submit_ok(env, "garbled", "svc-garbled");
  ASSERT_FALSE(id.empty());
  responsiveness resp;
  ASSERT_TRUE(wait_probing(
      env, id, resp, [&] { return env.get_change(id)["phase"] == "CREATE_FAILED"; }, 60s))
      << env.get_change(id).dump();
  auto failed = env.get_change(id);
  expect_explained(failed, "garbage");
  EXPECT_EQ(failed["step"]["name"], "CREATE_ERROR");
  EXPECT_EQ(failed["timeline"].back()["cause"], "MR could not be read") << failed.dump();
  EXPECT_TRUE(wait_until([&] { return env.get_change(id)["live"] == false; }, 10s))
      << "a failed operation is not left running";
  EXPECT_EQ(resp.failures, 0) << resp.last_failure;
}
