// Durability (issue 9): changeflowd is SIGKILLed at random points while many changes are in
// flight, restarted each time, and every operation still ends in a terminal state or an explicit,
// explained waiting state, with no MR merged twice, no bot approving twice, no table invariant
// broken, and exactly one MERGED -> VALIDATED flip recorded per validated operation.

#include "tests/support/flow_env.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <thread>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

const std::set<std::string> terminal_phases = {"VALIDATED", "CREATE_FAILED", "HANDLE_FAILED", "REJECTED", "CLOSED"};

/// A phase in which nothing is running and the user has been told what to do: terminal, or a
/// wait for the outside world (approval decision, deploy confirmation) with hint KEEP_WAITING.
bool settled(const json& c) {
  if (!c.contains("phase")) return false;
  auto phase = c["phase"].get<std::string>();
  if (terminal_phases.count(phase)) return true;
  auto step = c["step"]["name"].get<std::string>();
  bool waiting_outside = step == "APPROVAL_SENT" || phase == "MERGED";
  return waiting_outside && c.value("hint", "") == "KEEP_WAITING";
}

void check_invariants(flow_env& env) {
  auto& db = env.db();
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM (SELECT subject_id, target_key FROM binding GROUP BY subject_id, "
                      "target_key HAVING COUNT(*) > 1) d"),
            "0")
      << "one binding per (subject, target)";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding b LEFT JOIN operation o ON o.operation_id = b.operation_id "
                      "WHERE o.operation_id IS NULL"),
            "0")
      << "every binding's operation exists";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding b JOIN operation o ON o.operation_id = b.operation_id "
                      "WHERE o.phase <> b.phase"),
            "0")
      << "binding phase equals its operation's phase";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM (SELECT operation_id FROM merge_batch_request GROUP BY operation_id "
                      "HAVING COUNT(*) > 1) d"),
            "0")
      << "no operation in two batches";
  EXPECT_LE(std::stoi(db.scalar("SELECT COUNT(*) FROM merge_batch WHERE status IN (1, 4)")), 1)
      << "at most one active batch";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM (SELECT mr_iid FROM operation WHERE mr_iid IS NOT NULL AND batch_id IS "
                      "NULL GROUP BY mr_iid HAVING COUNT(*) > 1) d"),
            "0")
      << "no two operations share an MR (a re-run creation step reuses its own MR)";
}

}  // namespace

TEST(Crash, SigkillAtRandomPointsLosesNothingAndDoublesNothing) {
  const unsigned seed = static_cast<unsigned>(std::random_device{}());
  std::cout << "crash test seed " << seed << "\n";
  std::mt19937 rng(seed);
  flow_env env(json{{"instance", {{"id", "crash-a"}, {"lease_seconds", 3}}},
                    {"durability", {{"inbox_poll_ms", 200}, {"sweep_interval_ms", 500}, {"stuck_after_seconds", 2}}},
                    {"rehydrate", {{"rate_per_second", 400}}},
                    // A deploy callback sent while the service was down is lost by the sender after
                    // its retries; reconciliation validates those operations (seeds 3.7).
                    {"reconcile", {{"interval_ms", 1000}, {"min_age_seconds", 1}}}},
               // Slow enough approvals and pipelines that each kill lands in the middle of flows.
               {"--callback-delay-ms", "250", "--pipeline-duration-ms", "400"});
  constexpr int total = 40;
  std::vector<std::string> ids;
  auto submit_wave = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      auto r = env.submit("crash change " + std::to_string(i), "crash-user", "svc-" + std::to_string(i));
      ASSERT_EQ(r.status, 202) << r.body << r.error;
      ids.push_back(json::parse(r.body)["data"]["operationId"].get<std::string>());
    }
  };
  // Four waves of ten; after each of the first three, SIGKILL at a random point of the flow and
  // restart at once (a crash mid-step: approval submission, MR creation, pipeline wait, merge...).
  int kills = 0;
  int in_flight_at_kill = 0;  // operations in a non-terminal phase at the moment of each SIGKILL
  auto in_flight = [&] {
    return std::stoi(env.db().scalar("SELECT COUNT(*) FROM operation WHERE phase NOT IN ('VALIDATED', "
                                     "'CREATE_FAILED', 'HANDLE_FAILED', 'REJECTED', 'CLOSED')"));
  };
  for (int wave = 0; wave < 4; ++wave) {
    submit_wave(wave * 10, wave * 10 + 10);
    if (wave == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 1200)(rng)));
    in_flight_at_kill += in_flight();
    env.kill_service();
    ++kills;
    env.restart_service();
    // A second kill soon after the restart hits the rehydration itself.
    if (wave == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(20, 400)(rng)));
      in_flight_at_kill += in_flight();
      env.kill_service();
      ++kills;
      env.restart_service();
    }
  }
  ASSERT_GE(kills, 3);
  std::cout << "kills " << kills << ", operations in flight at the kills (summed) " << in_flight_at_kill << "\n";
  ASSERT_GT(in_flight_at_kill, 0) << "the kills must interrupt operations mid-flight";
  ASSERT_EQ(ids.size(), static_cast<size_t>(total));

  // Every operation settles: all reach a terminal phase, unless a callback was lost by its sender
  // while the service was down (then: an explained wait, checked below).
  std::map<std::string, json> final_state;
  auto all_terminal = [&] {
    for (const auto& id : ids) {
      auto c = env.get_change(id);
      if (!c.contains("phase") || !terminal_phases.count(c["phase"].get<std::string>())) return false;
    }
    return true;
  };
  if (!wait_until(all_terminal, std::chrono::seconds(40))) {
    for (const auto& id : ids) {
      auto c = env.get_change(id);
      EXPECT_TRUE(settled(c)) << "operation neither terminal nor in an explained wait: " << c.dump(2);
    }
  }
  std::map<std::string, int> by_phase;
  for (const auto& id : ids) {
    final_state[id] = env.get_change(id);
    ++by_phase[final_state[id]["phase"].get<std::string>()];
  }
  for (const auto& [p, n] : by_phase) std::cout << "  phase " << p << ": " << n << "\n";
  // Nothing in this run can legitimately fail: no faults were injected, so a crash must not turn
  // into a failure state either.
  EXPECT_EQ(by_phase["CREATE_FAILED"] + by_phase["HANDLE_FAILED"], 0) << [&] {
    std::string s;
    for (auto& [id, c] : final_state)
      if (c["phase"] == "CREATE_FAILED" || c["phase"] == "HANDLE_FAILED") s += c.dump(2) + "\n";
    return s;
  }();
  EXPECT_GE(by_phase["VALIDATED"], total / 2) << "most changes complete despite the crashes";

  // GitLab side: no MR merged twice, no bot approved an MR twice.
  auto stats = json::parse(env.sim_call("GET", "/_sim/stats").body);
  for (const auto& [mr, count] : stats["merges"].items()) EXPECT_EQ(count.get<int>(), 1) << "merges of " << mr;
  for (const auto& [mr, users] : stats["approvals"].items()) {
    for (const auto& [user, count] : users.items()) EXPECT_LE(count.get<int>(), 1) << mr << " by " << user;
  }
  // An operation may only be left waiting for its approval when the approval system gave up
  // delivering its callback (the service was down for all of the sender's retries).
  std::cout << "  sim callbacks " << stats["callbacks"].dump() << "\n";
  EXPECT_LE(by_phase["APPROVAL_SENT"], stats["callbacks"].value("approval_failed", 0))
      << "an operation waits for an approval callback that was never given up on";
  int merged_ops = by_phase["VALIDATED"] + by_phase["MERGED"];
  EXPECT_EQ(static_cast<int>(stats["merges"].size()), merged_ops) << stats.dump();

  check_invariants(env);
  // The validated count equals the flips recorded in the timeline, one per operation.
  auto flips = env.db().scalar("SELECT COUNT(*) FROM operation_event WHERE from_phase = 'MERGED' AND to_phase = "
                               "'VALIDATED'");
  auto flipped_ops = env.db().scalar("SELECT COUNT(DISTINCT operation_id) FROM operation_event WHERE from_phase = "
                                     "'MERGED' AND to_phase = 'VALIDATED'");
  EXPECT_EQ(std::stoi(flips), by_phase["VALIDATED"]);
  EXPECT_EQ(flips, flipped_ops) << "an operation was validated twice";
  // Rehydration actually happened (the restarts resumed operations from their rows).
  EXPECT_NE(env.service().process().log_contents().find("rehydrate.loaded"), std::string::npos);
}

// Rehydration after a crash: rows waiting for a callback start at once, rows due for an external
// call keep the pace (rehydrate.rate_per_second, here 1/s so the difference is unmistakable).
TEST(Crash, RestartResumesWaitingRowsWithoutPaceAndDueRowsPaced) {
  flow_env env(json{{"instance", {{"id", "rehydrate-inst"}}}});
  auto& db = env.db();
  constexpr int waiting = 60, due = 8;
  env.add_fault(json{{"kind", "approval_callback"}, {"mode", "drop"}, {"match", "wait-approval"}});
  env.add_fault(json{{"kind", "pipeline_hang"}, {"match", "hung-pipeline"}});
  for (int i = 0; i < waiting; ++i)
    ASSERT_EQ(env.submit("wait-approval " + std::to_string(i), "rh-user", "rh-wait-" + std::to_string(i)).status, 202);
  for (int i = 0; i < due; ++i)
    ASSERT_EQ(env.submit("hung-pipeline " + std::to_string(i), "rh-user", "rh-due-" + std::to_string(i)).status, 202);
  auto count = [&](const std::string& where) { return std::stoi(db.scalar("SELECT COUNT(*) FROM operation WHERE " + where)); };
  ASSERT_TRUE(wait_until([&] { return count("step = 10012") == waiting && count("step = 10003") == due; },
                         std::chrono::seconds(60)))
      << db.scalar("SELECT GROUP_CONCAT(DISTINCT step) FROM operation");  // APPROVAL_SENT, CREATE_PIPELINE_PENDING
  env.kill_service();
  env.restart_service(json{{"rehydrate", {{"rate_per_second", 1}}}});
  auto metric = [&](const std::string& name) {
    auto body = http_call("127.0.0.1", env.port(), "GET", "/metrics").body;
    double sum = 0;
    for (std::size_t at = body.find("\n" + name); at != std::string::npos; at = body.find("\n" + name, at + 1)) {
      auto eol = body.find('\n', at + 1);
      auto line = body.substr(at + 1, eol - at - 1);
      sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
    return sum;
  };
  // All waiting rows live while most due rows are still queued behind the 1/s pace.
  double queued = 0;
  ASSERT_TRUE(wait_until([&] {
    queued = metric("changeflow_rehydrate_queue");
    return metric("changeflow_live_actors{phase=\"APPROVAL_SENT\"}") >= waiting;
  }, std::chrono::seconds(30)));
  EXPECT_GE(queued, 1) << "the due rows are paced, not started in one burst";
  // The paced rows are resumed too, one a second.
  EXPECT_TRUE(wait_until([&] { return metric("changeflow_rehydrate_queue") == 0; }, std::chrono::seconds(60)));
  EXPECT_EQ(http_call("127.0.0.1", env.port(), "GET", "/readyz").status, 200);
}
