// Durability: changeflowd is SIGKILLed at random points while many changes are in flight and
// restarted each time. Kills are the only fault, so every change must end VALIDATED, resumed by
// the restarted process itself: rehydration, and the approval system's callback retries, which wake
// or spawn the actor of a row waiting in APPROVAL_SENT (the sweeper's stuck scan keeps its default
// of a minute), with no side effect repeated in GitLab (judged on the requests the sim received), no
// table invariant broken, and exactly one MERGED -> VALIDATED flip per operation. Because callback
// retries also resume rows, this test alone does not prove rehydration works: with a rehydrator
// that never spawned, it still ended 40/40 (the last kill had left only APPROVAL_SENT and MERGED
// rows). RestartResumesWaitingRowsWithoutPaceAndDueRowsPaced is the test that catches that break.
//
// The kill points come from a seed printed at the start; CHANGEFLOW_CRASH_SEED=<seed> replays them.

#include "tests/support/flow_env.hpp"
#include "tests/support/sim_attempts.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <thread>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

unsigned crash_seed() {
  if (const char* v = std::getenv("CHANGEFLOW_CRASH_SEED"); v && *v) return static_cast<unsigned>(std::stoul(v));
  return static_cast<unsigned>(std::random_device{}());
}

/// The `rehydrate.loaded` log line in `log_tail` with at least one resumed row (owned by this
/// instance id or taken over from an expired lease); false when there is none.
bool rehydrated_rows(const std::string& log_tail) {
  std::size_t at = 0;
  while ((at = log_tail.find("\"rehydrate.loaded\"", at)) != std::string::npos) {
    auto begin = log_tail.rfind('\n', at);
    begin = begin == std::string::npos ? 0 : begin + 1;
    auto end = log_tail.find('\n', at);
    auto line =
        json::parse(log_tail.substr(begin, end == std::string::npos ? std::string::npos : end - begin), nullptr, false);
    if (!line.is_discarded() && line.value("owned", 0) + line.value("taken_over", 0) > 0) return true;
    at = end == std::string::npos ? log_tail.size() : end;
  }
  return false;
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
  const unsigned seed = crash_seed();
  std::cout << "crash test seed " << seed << " (replay: CHANGEFLOW_CRASH_SEED=" << seed << ")\n";
  std::mt19937 rng(seed);
  // durability.stuck_after_seconds stays at its default (60 s), beyond every wait below: an
  // operation the restart failed to resume would stay put instead of being rescued by the sweep.
  flow_env env(json{{"instance", {{"id", "crash-a"}, {"lease_seconds", 3}}},
                    {"durability", {{"inbox_poll_ms", 200}, {"sweep_interval_ms", 500}}},
                    {"rehydrate", {{"rate_per_second", 400}}},
                    {"reconcile", {{"interval_ms", 1000}, {"min_age_seconds", 1}}}},
               // Slow enough approvals and pipelines that each kill lands in the middle of flows.
               // The sim keeps re-delivering its callbacks (backoff capped at 2 s, about two
               // minutes) as a real sender does, so none is given up while the service restarts.
               {"--callback-delay-ms", "250", "--pipeline-duration-ms", "400", "--callback-attempts", "60"});
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
  int in_flight_at_last_kill = 0;
  std::size_t last_start_offset = 0;  // the log is appended to by every start: judge only the last one
  auto in_flight = [&] {
    return std::stoi(
        env.db().scalar("SELECT COUNT(*) FROM operation WHERE phase NOT IN ('VALIDATED', "
                        "'CREATE_FAILED', 'HANDLE_FAILED', 'REJECTED', 'CLOSED')"));
  };
  auto kill_and_restart = [&] {
    in_flight_at_last_kill = in_flight();
    in_flight_at_kill += in_flight_at_last_kill;
    env.kill_service();
    ++kills;
    last_start_offset = env.service().process().log_contents().size();
    env.restart_service();
  };
  for (int wave = 0; wave < 4; ++wave) {
    submit_wave(wave * 10, wave * 10 + 10);
    if (wave == 3) break;
    // The last kill comes within 600 ms of its wave's submits, well before the quickest possible
    // flow ends (approval 250 ms + two pipelines of 400 ms), so the last restart has rows to resume.
    int max_delay = wave == 2 ? 600 : 1200;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(50, max_delay)(rng)));
    kill_and_restart();
    // A second kill soon after the restart hits the rehydration itself.
    if (wave == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(20, 400)(rng)));
      kill_and_restart();
    }
  }
  ASSERT_GE(kills, 3);
  std::cout << "kills " << kills << ", operations in flight at the kills (summed) " << in_flight_at_kill
            << ", at the last kill " << in_flight_at_last_kill << "\n";
  ASSERT_GT(in_flight_at_last_kill, 0) << "the last kill must interrupt operations mid-flight";
  ASSERT_EQ(ids.size(), static_cast<size_t>(total));

  // The restarted process itself resumed rows: its own part of the appended log, not an earlier start's.
  EXPECT_TRUE(
      wait_until([&] { return rehydrated_rows(env.service().process().log_contents().substr(last_start_offset)); },
                 std::chrono::seconds(30)))
      << "the last restart logged no rehydrate.loaded with resumed rows:\n"
      << env.service().process().log_contents().substr(last_start_offset, 4000);

  // Liveness: kills are the only fault, so every change completes.
  std::map<std::string, json> final_state;
  auto all_validated = [&] {
    for (const auto& id : ids) {
      auto c = env.get_change(id);
      if (!c.contains("phase") || c["phase"] != "VALIDATED") return false;
    }
    return true;
  };
  bool validated = wait_until(all_validated, std::chrono::seconds(120));
  std::map<std::string, int> by_step;
  for (const auto& id : ids) {
    final_state[id] = env.get_change(id);
    const auto& c = final_state[id];
    ++by_step[c.value("phase", "?") + "/" + (c.contains("step") ? c["step"].value("name", "?") : "?")];
  }
  for (const auto& [p, n] : by_step) std::cout << "  " << p << ": " << n << "\n";
  EXPECT_TRUE(validated) << [&] {
    std::string s;
    for (auto& [id, c] : final_state)
      if (c.value("phase", "") != "VALIDATED") s += c.dump(2) + "\n";
    return s;
  }();

  // GitLab side, judged on what the service attempted: after an MR merged, no merge request for it;
  // no approve by a bot that had approved; no second MR for a branch. One merged MR per change.
  auto stats = sim_stats(env);
  std::cout << "  sim callbacks " << stats["callbacks"].dump() << "\n";
  EXPECT_EQ(repeated_side_effects(stats), "");
  EXPECT_EQ(stats["merges"].size(), ids.size()) << stats.dump();
  EXPECT_EQ(stats["callbacks"].value("approval_failed", 0), 0) << "the sender gave up on an approval callback";

  check_invariants(env);
  // The validated count equals the flips recorded in the timeline, one per operation.
  auto flips = env.db().scalar(
      "SELECT COUNT(*) FROM operation_event WHERE from_phase = 'MERGED' AND to_phase = "
      "'VALIDATED'");
  auto flipped_ops = env.db().scalar(
      "SELECT COUNT(DISTINCT operation_id) FROM operation_event WHERE from_phase = "
      "'MERGED' AND to_phase = 'VALIDATED'");
  EXPECT_EQ(flips, std::to_string(total));
  EXPECT_EQ(flips, flipped_ops) << "an operation was validated twice";
}

// Rehydration after a crash: rows waiting for a callback start at once, rows due for an external
// call keep the pace (rehydrate.rate_per_second, here 1/s so the difference is unmistakable).
// Seen to catch a rehydrator whose pacer never spawns the actors it dequeues (the waiting rows
// never came back live).
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
  auto count = [&](const std::string& where) {
    return std::stoi(db.scalar("SELECT COUNT(*) FROM operation WHERE " + where));
  };
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
  // All waiting rows resumed while most due rows are still queued behind the 1/s pace. A wait of
  // days (the default approval wait) is resumed without an actor: passivated at spawn.
  double queued = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        queued = metric("changeflow_rehydrate_queue");
        return metric("changeflow_passivated_total{when=\"spawn\"}") >= waiting;
      },
      std::chrono::seconds(30)));
  EXPECT_EQ(metric("changeflow_live_actors{phase=\"APPROVAL_SENT\"}"), 0) << "no actor holds a wait of days";
  EXPECT_GE(queued, 1) << "the due rows are paced, not started in one burst";
  // The paced rows are resumed too, one a second.
  EXPECT_TRUE(wait_until([&] { return metric("changeflow_rehydrate_queue") == 0; }, std::chrono::seconds(60)));
  EXPECT_EQ(http_call("127.0.0.1", env.port(), "GET", "/readyz").status, 200);
}
