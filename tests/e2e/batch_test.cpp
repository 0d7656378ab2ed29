// Batch path end to end: real MariaDB, changeflow-sim and changeflowd with batch.enabled.
#include "tests/support/flow_env.hpp"
#include "tests/support/jwt_token.hpp"
#include "tests/support/sim_attempts.hpp"
#include "tests/support/sim_repository.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

json batch_config() {
  return json{{"batch", {{"enabled", true}, {"round_interval_ms", 300}, {"max_members", 50}, {"max_splits", 6}}}};
}

std::string submit_ok(flow_env& env, const std::string& title, const std::string& subject, const std::string& target) {
  auto r = env.submit(title, subject, target);
  EXPECT_EQ(r.status, 202) << r.body << r.error;
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("data")) return {};
  return j["data"]["operationId"].get<std::string>();
}

int count(flow_env& env, const std::string& sql) {
  return std::stoi(env.db().scalar(sql));
}

/// Paces the background loops of a test: `pause` waits until the next beat or until `stop` is
/// called, so a loop neither spins a core (two cores, several builds and services) nor outlives
/// the run.
class pacer {
 public:
  bool pause(std::chrono::milliseconds beat) {
    std::unique_lock lock(mu_);
    return !cv_.wait_for(lock, beat, [&] { return stopped_; });
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

}  // namespace

TEST(Batch, BurstOfFiftyEndsInAHandfulOfBatchMrsAllValidated) {
  flow_env env(batch_config());
  std::vector<std::string> ids;
  for (int i = 0; i < 50; ++i)
    ids.push_back(
        submit_ok(env, "burst " + std::to_string(i), "user-" + std::to_string(i), "svc-" + std::to_string(i)));
  int max_active = 0;
  for (const auto& id : ids) {
    auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(120));
    ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
    EXPECT_EQ(c["step"]["name"], "CALLED_BACK");
    EXPECT_TRUE(is_subsequence({"APPROVAL_APPROVED", "BATCH_WAITING", "BATCH_CLAIMED", "BATCH_MERGED", "CALLED_BACK"},
                               timeline_steps(c)))
        << c.dump(2);
    max_active = std::max(max_active, count(env, "SELECT COUNT(*) FROM merge_batch WHERE status IN (1, 4)"));
  }
  EXPECT_LE(max_active, 1);  // I1, observed during the run
  const int batches = count(env, "SELECT COUNT(*) FROM merge_batch WHERE status = 2");
  EXPECT_GE(batches, 1);
  EXPECT_LE(batches, 10) << "50 changes should ride in a handful of batch MRs";
  EXPECT_EQ(count(env, "SELECT COUNT(DISTINCT mr_iid) FROM operation"), batches);
  // Exactly one BATCH_MERGED event per member.
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM operation_event WHERE to_step = 10604"), 50);
}

TEST(Batch, OneBadMemberIsBisectedDownAndFailsAloneTheOthersMerge) {
  // Rounds only by hand at first so the six changes land in one batch.
  json cfg = batch_config();
  cfg["batch"]["round_interval_ms"] = 600000;
  flow_env env(cfg);
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i)
    ids.push_back(submit_ok(env, (i == 4 ? "poison-change" : "good-change-" + std::to_string(i)),
                            "user-" + std::to_string(i), "bis-" + std::to_string(i)));
  for (const auto& id : ids) ASSERT_EQ(env.wait_for_step(id, "BATCH_WAITING")["step"]["name"], "BATCH_WAITING");
  // Every pipeline of an MR whose title carries the poisoned member's title fails.
  env.add_fault(json{{"kind", "pipeline_fail"}, {"match", "poison-change"}});
  // The service now runs rounds often (hot reload) to walk the bisection.
  env.restart_service(json{{"batch", {{"round_interval_ms", 200}}}});
  for (int i = 0; i < 6; ++i) {
    if (i == 4) continue;
    auto c = env.wait_for_phase(ids[i], "VALIDATED", std::chrono::seconds(120));
    EXPECT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  }
  auto bad = env.wait_for_step(ids[4], "BATCH_FAILED", std::chrono::seconds(120));
  EXPECT_EQ(bad["step"]["name"], "BATCH_FAILED") << bad.dump(2);
  EXPECT_EQ(bad["phase"], "HANDLE_FAILED");
  EXPECT_EQ(bad["hint"], "CONTACT_MAINTAINERS");
  EXPECT_GE(count(env, "SELECT COUNT(*) FROM merge_batch WHERE failure_reason LIKE 'bisect%'"), 1);
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch WHERE status IN (1, 4)"), 0);
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = '" + ids[4] + "'"), 0);
}

// A batch whose members update files that exist: GitLab accepted the batch commit only because each
// file's last commit at the commit's parent was the base its update named, so the check before the
// merge reads only main's version of each file while the MR forks there. Reads of files: one per
// member to capture its base before the commit, then one per file for each merge attempt (two per
// file per attempt when only created files were known).
TEST(Batch, UpdatedFilesAreReadOnceBeforeTheBatchMerge) {
  json cfg = batch_config();
  cfg["batch"]["round_interval_ms"] = 600000;  // one batch for all three: rounds start once they wait
  flow_env env(cfg);
  constexpr int members = 3;
  std::vector<std::string> ids;
  for (int i = 0; i < members; ++i) {
    const auto path = "config/batched-" + std::to_string(i) + ".yaml";
    seed_repo_file(env, path, "n: 0\n");
    ids.push_back(submit_files(env, "batched update " + std::to_string(i), "batched-" + std::to_string(i),
                               json::array({file_change(path, "n: 1\n")})));
  }
  for (const auto& id : ids) ASSERT_EQ(env.wait_for_step(id, "BATCH_WAITING")["step"]["name"], "BATCH_WAITING");
  const int reads_before = sim_stats(env)["requests"].value("get_file", 0);
  env.restart_service(json{{"batch", {{"round_interval_ms", 200}}}});
  for (const auto& id : ids) {
    auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(60));
    ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  }
  ASSERT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch"), 1) << "the three rode in one batch";
  auto stats = sim_stats(env);
  const int merges = stats["requests"].value("merge", 0);
  EXPECT_GE(merges, 1);
  EXPECT_EQ(stats["requests"].value("rebase", 0), 0) << stats["requests"].dump();
  EXPECT_EQ(stats["requests"].value("get_file", 0) - reads_before, members + members * merges)
      << stats["requests"].dump();
  for (int i = 0; i < members; ++i) {
    EXPECT_EQ(read_repo_file(env, "config/batched-" + std::to_string(i) + ".yaml")->content, "n: 1\n");
  }
}

TEST(Batch, TwoMembersTouchingTheSameFileTheLaterWaitsForTheNextRound) {
  flow_env env(batch_config());
  auto first = submit_ok(env, "same-file-1", "alice", "shared-target");
  auto second = submit_ok(env, "same-file-2", "bob", "shared-target");
  auto a = env.wait_for_phase(first, "VALIDATED", std::chrono::seconds(60));
  auto b = env.wait_for_phase(second, "VALIDATED", std::chrono::seconds(60));
  ASSERT_EQ(a["phase"], "VALIDATED");
  ASSERT_EQ(b["phase"], "VALIDATED");
  // Whether they were claimed together or not, they never shared one batch MR.
  EXPECT_NE(a["mrIid"], b["mrIid"]);
}

TEST(Batch, CrashedCoordinatorsRunningBatchIsSettledBySweep) {
  json cfg = batch_config();
  cfg["batch"]["round_interval_ms"] = 200;
  flow_env env(cfg);
  auto id = submit_ok(env, "hang-change", "carol", "hang-target");
  env.add_fault(json{{"kind", "pipeline_hang"}, {"match", "hang-change"}, {"count", 1}});
  ASSERT_EQ(env.wait_for_step(id, "BATCH_CLAIMED")["step"]["name"], "BATCH_CLAIMED");
  ASSERT_TRUE(wait_until(
      [&] { return count(env, "SELECT COUNT(*) FROM merge_batch WHERE status = 1 AND mr_iid IS NOT NULL") == 1; },
      std::chrono::seconds(30)));
  env.kill_service();
  // Let the orphan age past the restarted service's running timeout (database clock).
  ASSERT_TRUE(wait_until(
      [&] {
        return count(env,
                     "SELECT COUNT(*) FROM merge_batch WHERE status = 1 AND created_at < NOW(3) - INTERVAL 2 SECOND") ==
               1;
      },
      std::chrono::seconds(30)));
  // The restarted service has a 1 s running timeout: its sweep settles the orphan (requeue), the
  // member is claimed again into a fresh batch whose pipeline passes (the hang fired once).
  env.restart_service(json{{"batch", {{"running_timeout_seconds", 1}}}});
  auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(90));
  EXPECT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch WHERE status = 3 AND failure_reason LIKE '%sweep%'"), 1);
  EXPECT_TRUE(is_subsequence({"BATCH_CLAIMED", "BATCH_WAITING", "BATCH_CLAIMED", "BATCH_MERGED"}, timeline_steps(c)))
      << c.dump(2);
}

TEST(Batch, MergeThatLandsRightAfterTheFailureWasDecidedWins) {
  json cfg = batch_config();
  cfg["batch"]["round_interval_ms"] = 200;
  flow_env env(cfg);
  // The batch pipeline fails (failure decided); when the coordinator closes the MR, a merge has
  // just landed (another merger): the re-read after the close finds it merged.
  env.add_fault(json{{"kind", "pipeline_fail"}, {"match", "late-merge-change"}, {"count", 1}});
  env.add_fault(json{{"kind", "merged_before_close"}, {"match", "late-merge-change"}, {"count", 1}});
  auto id = submit_ok(env, "late-merge-change", "dora", "late-merge-target");
  auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(60));
  ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  EXPECT_TRUE(is_subsequence({"BATCH_WAITING", "BATCH_CLAIMED", "BATCH_MERGED", "CALLED_BACK"}, timeline_steps(c)))
      << c.dump(2);
  // One batch, settled SUCCEEDED through the failure path's re-read; no requeue, no split.
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch"), 1);
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch WHERE status = 2"), 1);
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + id +
                           "' AND to_step = 10604 AND cause LIKE '%merged wins%'"),
            1);
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch_history WHERE event = 'REQUEUED'"), 0);
  // Judged on the requests the sim received: a merge of a merged MR is refused, so only the
  // attempts show one.
  EXPECT_EQ(repeated_side_effects(sim_stats(env)), "");
}

TEST(Batch, TwoCoordinatorProcessesOnOneDatabaseNeverHoldTwoActiveBatches) {
  constexpr const char* secret = "batch-ops-secret";
  json cfg = batch_config();
  cfg["batch"]["round_interval_ms"] = 60;
  cfg["batch"]["max_members"] = 4;  // many rounds
  cfg["auth"] = {{"jwt_secret", secret}};
  cfg["rate_limit"] = {{"ops", 100000}};
  cfg["instance"] = {{"id", "coord-a"}};
  flow_env env(cfg);
  ASSERT_EQ(
      env.sim_call("POST", "/_sim/permissions", json{{"subject", "alice"}, {"granted", {"changeflow.ops"}}}.dump())
          .status,
      200);
  json cfg_b = env.config();
  cfg_b["instance"]["id"] = "coord-b";
  cfg_b["http"]["port"] = free_port();
  auto b = std::make_unique<service_process>(cfg_b, env.dir(), "changeflowd-b");
  const std::vector<unsigned short> ports = {env.port(), static_cast<unsigned short>(cfg_b["http"]["port"].get<int>())};

  // Sample the active-slot count for the whole run, and fire manual rounds at both instances.
  // Both loops are paced: a sample every few milliseconds still sees the slot far more often than
  // batches change hands (every batch lives for a pipeline), and the lifetime-overlap query below
  // checks the moments between samples.
  pacer run;
  std::atomic<int> max_active{0};
  std::atomic<int> manual_rounds{0};
  // Until coord-a is seen driving a batch, the manual rounds go to coord-a only (coord-b still runs
  // its own timed rounds): with rounds at both, coord-b could win every round of a short run, and
  // the kill below needs a batch its live peer drives.
  std::atomic<bool> rounds_at_a_only{true};
  std::thread sampler([&] {
    test_connection conn(env.db());
    do {
      auto active = conn.scalar("SELECT COUNT(*) FROM merge_batch WHERE status IN (1, 4)");
      if (!active.empty()) max_active = std::max(max_active.load(), std::stoi(active));
    } while (run.pause(std::chrono::milliseconds(5)));
  });
  std::thread trigger([&] {
    const std::vector<std::pair<std::string, std::string>> h = {
        {"Authorization", "Bearer " + changeflow::testing::mint_hs256(secret, "alice", 600)}};
    int i = 0;
    do {
      auto r =
          http_call("127.0.0.1", ports[rounds_at_a_only ? 0 : i++ % 2], "POST", "/api/v1/ops/batch/round", "{}", h);
      if (r.status == 200 || r.status == 202) ++manual_rounds;
    } while (run.pause(std::chrono::milliseconds(10)));
  });

  std::vector<std::string> ids;
  for (int i = 0; i < 24; ++i) {
    json body = {{"subject", "coord-user-" + std::to_string(i)},
                 {"target", "coord-svc-" + std::to_string(i)},
                 {"title", "coord change " + std::to_string(i)},
                 {"files", {{{"path", "config/coord-" + std::to_string(i) + ".yaml"}, {"content", "v: 1\n"}}}}};
    auto r = http_call("127.0.0.1", ports[i % 2], "POST", "/api/v1/changes", body.dump());
    ASSERT_EQ(r.status, 202) << r.body << r.error;
    ids.push_back(json::parse(r.body)["data"]["operationId"].get<std::string>());
  }
  // While coord-a drives a batch, coord-b is SIGKILLed and restarted with its own id: it resumes
  // only its own batches, never the one its live peer drives (two drivers would approve and merge
  // one MR twice, which the sim's attempt counts below would show).
  ASSERT_TRUE(wait_until(
      [&] {
        return count(env, "SELECT COUNT(*) FROM merge_batch WHERE status = 1 AND owner_instance = 'coord-a'") == 1;
      },
      std::chrono::seconds(60)))
      << "coord-a never drove a batch";
  rounds_at_a_only = false;
  b->process().kill_now();
  b = std::make_unique<service_process>(cfg_b, env.dir(), "changeflowd-b2");
  for (const auto& id : ids) {
    auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(120));
    EXPECT_EQ(c["phase"], "VALIDATED") << c.dump(2);
  }
  run.stop();
  sampler.join();
  trigger.join();

  EXPECT_LE(max_active.load(), 1) << "I1: at most one RUNNING/BLOCKED batch at any sampled moment";
  EXPECT_GT(manual_rounds.load(), 0);
  // No two batches' lifetimes (slot taken .. settlement) overlap within their partition.
  const std::string overlapping =
      " FROM merge_batch a JOIN merge_batch b ON a.id < b.id AND a.repository = b.repository "
      "AND a.target_branch = b.target_branch "
      "WHERE a.created_at < b.updated_at AND b.created_at < a.updated_at";
  auto overlap = env.db().query("SELECT COUNT(*)" + overlapping);
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0][0], "0") << "two batches were active at the same time";
  if (overlap[0][0] != "0") {
    // What a failure needs to be explained: the overlapping pairs as the rows hold them.
    for (const auto& row : env.db().query(
             "SELECT a.id, a.status, a.repository, a.target_branch, a.owner_instance, a.created_at, a.updated_at, "
             "b.id, b.status, b.repository, b.target_branch, b.owner_instance, b.created_at, b.updated_at" +
             overlapping)) {
      std::string line;
      for (const auto& v : row) line += v + " | ";
      std::cout << "overlapping batches: " << line << "\n";
    }
  }
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch WHERE status IN (1, 3, 4)"), 0);
  EXPECT_GE(count(env, "SELECT COUNT(*) FROM merge_batch WHERE status = 2"), 6) << "max 4 members per batch";
  // Every member was claimed exactly once, by one of the two coordinators.
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM operation_event WHERE to_step = 10602"), 24);
  EXPECT_EQ(count(env,
                  "SELECT COUNT(*) FROM operation_event WHERE to_step = 10602 AND instance_id NOT IN "
                  "('coord-a', 'coord-b')"),
            0);
  // Both coordinators ran rounds that met an occupied slot or claimed: contention really happened.
  auto rounds = [&](unsigned short port, const std::string& outcome) {
    auto m = http_call("127.0.0.1", port, "GET", "/metrics");
    const std::string key = "changeflow_batch_rounds_total{outcome=\"" + outcome + "\"}";
    auto at = m.body.find(key);
    return at == std::string::npos ? 0.0 : std::stod(m.body.substr(at + key.size()));
  };
  double occupied = rounds(ports[0], "slot_occupied") + rounds(ports[1], "slot_occupied");
  double claimed = rounds(ports[0], "claimed") + rounds(ports[1], "claimed");
  EXPECT_GT(occupied, 0) << "the coordinators never contended for the slot";
  std::cout << "batches " << claimed << ", slot_occupied rounds " << occupied << ", manual rounds " << manual_rounds
            << ", members claimed by coord-b "
            << env.db().scalar("SELECT COUNT(*) FROM operation_event WHERE to_step = 10602 AND instance_id = 'coord-b'")
            << "\n";
  // coord-b's counters start again at its restart: the rounds counted can only fall short of the rows.
  EXPECT_LE(claimed, count(env, "SELECT COUNT(*) FROM merge_batch"));
  EXPECT_GT(claimed, 0);
  // Judged on the requests the sim received: a merge of a merged MR is refused, so only the
  // attempts show one.
  EXPECT_EQ(repeated_side_effects(sim_stats(env)), "");
  // The restarted coord-b resumed only batches it owned (with the old start-up adoption it also
  // resumed the batch coord-a was driving).
  std::istringstream b2_log(b->process().log_contents());
  int resumed = 0;
  for (std::string line; std::getline(b2_log, line);) {
    auto event = json::parse(line, nullptr, false);
    if (event.is_discarded() || event.value("event", "") != "batch.resume") continue;
    ++resumed;
    const auto batch_id = std::to_string(event.value("batch_id", 0));
    EXPECT_EQ(env.db().scalar("SELECT owner_instance FROM merge_batch WHERE id = " + batch_id), "coord-b")
        << "the restarted coord-b resumed batch " << batch_id << ", which coord-a drove";
  }
  std::cout << "batches resumed by the restarted coord-b: " << resumed << "\n";
  // Each batch names the coordinator that drove it.
  const std::vector<std::pair<std::string, std::string>> ops = {
      {"Authorization", "Bearer " + changeflow::testing::mint_hs256(secret, "alice", 600)}};
  auto listed = http_call("127.0.0.1", env.port(), "GET", "/api/v1/ops/batches?limit=100", {}, ops);
  ASSERT_EQ(listed.status, 200) << listed.body;
  auto batches = json::parse(listed.body)["data"]["items"];
  ASSERT_FALSE(batches.empty());
  for (const auto& batch : batches) {
    auto owner = batch["ownerInstance"];
    EXPECT_TRUE(owner == "coord-a" || owner == "coord-b") << batch.dump();
  }
}

TEST(Batch, MemberConflictingWithTheTargetFailsAfterMaxAttemptsTheOthersMerge) {
  constexpr int max_attempts = 3;
  // Rounds only by hand at first so the four changes land in one batch.
  json cfg = batch_config();
  cfg["batch"]["round_interval_ms"] = 600000;
  cfg["batch"]["max_attempts"] = max_attempts;
  flow_env env(cfg);
  std::vector<std::string> ids;
  const std::vector<std::string> targets = {"tc-good-0", "tc-conflicting", "tc-good-2", "tc-good-3"};
  for (std::size_t i = 0; i < targets.size(); ++i)
    ids.push_back(submit_ok(env, "target conflict " + targets[i], "tc-user-" + std::to_string(i), targets[i]));
  for (const auto& id : ids) ASSERT_EQ(env.wait_for_step(id, "BATCH_WAITING")["step"]["name"], "BATCH_WAITING");
  // Whenever a batch commit carries the conflicting member's file, someone pushes the same file to
  // the target branch right after: that batch's MR conflicts and no rebase can fix it. Batches
  // without that member are untouched.
  env.add_fault(json{{"kind", "target_conflict"}, {"match", "config/tc-conflicting.yaml"}});
  env.restart_service(json{{"batch", {{"round_interval_ms", 200}}}});

  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i == 1) continue;
    auto c = env.wait_for_phase(ids[i], "VALIDATED", std::chrono::seconds(120));
    EXPECT_EQ(c["phase"], "VALIDATED") << c.dump(2);
    EXPECT_TRUE(is_subsequence({"BATCH_CLAIMED", "BATCH_MERGED", "CALLED_BACK"}, timeline_steps(c))) << c.dump(2);
  }
  auto bad = env.wait_for_step(ids[1], "BATCH_FAILED", std::chrono::seconds(120));
  ASSERT_EQ(bad["step"]["name"], "BATCH_FAILED") << bad.dump(2);
  EXPECT_EQ(bad["phase"], "HANDLE_FAILED");
  EXPECT_EQ(bad["hint"], "CONTACT_MAINTAINERS");
  const std::string cause = bad["timeline"].back()["cause"].get<std::string>();
  EXPECT_NE(cause.find("rebase conflict with the target branch"), std::string::npos) << cause;
  EXPECT_NE(cause.find("no batch attempts left"), std::string::npos) << cause;
  const std::string op = "operation_id = '" + ids[1] + "'";
  EXPECT_EQ(
      env.db().scalar("SELECT last_error LIKE '%rebase conflict with the target branch%' FROM operation WHERE " + op),
      "1");
  EXPECT_EQ(count(env, "SELECT batch_attempts FROM operation WHERE " + op), max_attempts);
  // What happened, not only where it ended: claimed exactly max_attempts times, it left the
  // waiting set, and nothing is left running or waiting.
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM operation_event WHERE to_step = 10602 AND " + op), max_attempts);
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch_request WHERE " + op), 0);
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"), 0);
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch WHERE status IN (1, 4)"), 0);

  // The simulator's side: every batch commit carrying the conflicting file (the attempts) met the
  // conflict, one per attempt and no more; each of those MRs was rebased and refused, never merged.
  auto stats = json::parse(env.sim_call("GET", "/_sim/stats").body);
  EXPECT_EQ(stats["faults_fired"].value("target_conflict", 0), max_attempts) << stats.dump();
  EXPECT_EQ(stats["requests"].value("create_commit", 0), count(env, "SELECT COUNT(*) FROM merge_batch"))
      << "one batch commit per batch";
  EXPECT_GE(stats["requests"].value("rebase", 0), max_attempts) << stats.dump();
  int merged_mrs = 0;
  for (const auto& [mr, merges] : stats["merges"].items()) {
    EXPECT_EQ(merges.get<int>(), 1) << mr;
    ++merged_mrs;
  }
  EXPECT_EQ(merged_mrs, count(env, "SELECT COUNT(*) FROM merge_batch WHERE status = 2"));
  EXPECT_EQ(count(env, "SELECT COUNT(*) FROM merge_batch WHERE status = 3 AND failure_reason LIKE '%rebase conflict%'"),
            max_attempts);
}
