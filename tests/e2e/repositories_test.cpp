// Several GitLab repositories and branches end to end: real MariaDB, changeflow-sim serving three
// projects (one with two branches) and changeflowd with batch.enabled. Judged on the simulator's
// request log (GET /_sim/requests: every GitLab request in arrival order, refused ones included):
// what the service attempted, not what a UNIQUE key already guarantees.
#include "tests/support/flow_env.hpp"
#include "tests/support/sim_attempts.hpp"

#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <set>
#include <tuple>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

struct place {
  std::string repository;
  std::string branch;
  bool operator<(const place& o) const { return std::tie(repository, branch) < std::tie(o.repository, o.branch); }
  bool operator==(const place& o) const { return repository == o.repository && branch == o.branch; }
};
std::string str(const place& p) {
  return p.repository + "@" + p.branch;
}

const std::vector<place> partitions = {
    {"team/alpha", "main"}, {"team/beta", "main"}, {"team/beta", "release"}, {"team/gamma", "main"}};

json repositories_config() {
  return json{{"batch", {{"enabled", true}, {"round_interval_ms", 150}, {"max_members", 2}, {"max_splits", 6}}},
              {"repositories",
               {{"team/alpha", {{"branches", {"main"}}}},
                {"team/beta", {{"branches", {"main", "release"}}}},
                {"team/gamma", {{"branches", {"main"}}}}}}};
}
std::vector<std::string> sim_projects() {
  // Pipelines long enough that batches of different partitions are open at the same time.
  return {"--projects", "team/alpha=main;team/beta=main,release;team/gamma=main", "--pipeline-duration-ms", "400"};
}

http_result submit_to(flow_env& env, const place& where, const std::string& subject, const std::string& target,
                      const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  json body = {{"subject", subject},
               {"target", target},
               {"repository", where.repository},
               {"targetBranch", where.branch},
               {"title", "change " + target + " in " + str(where)},
               {"files", {{{"path", "config/" + target + ".yaml"}, {"content", "v: 1\n"}}}}};
  return http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump(), headers);
}

/// One batch MR's life as the request log shows it: opened by a 201 create, ended by the first
/// request after which the MR is merged or closed.
struct mr_life {
  place where;
  std::string source;
  std::int64_t iid = 0;
  std::uint64_t opened = 0;
  std::uint64_t ended = 0;  // 0: never ended in the log
};

}  // namespace

TEST(Repositories, ChangesToThreeRepositoriesAndTwoBranchesBatchInParallelPartitions) {
  flow_env env(repositories_config(), sim_projects());
  std::map<std::string, place> where_of;
  constexpr int per_partition = 6;
  for (int i = 0; i < per_partition; ++i) {
    for (const auto& p : partitions) {
      // The same target names in every repository (two targets each); within one repository a
      // target is held by one change whatever its branch, so the branch is in the name.
      const auto target = "svc-" + std::to_string(i) + "-" + p.branch;
      auto r = submit_to(env, p, "user-" + std::to_string(i), target);
      ASSERT_EQ(r.status, 202) << str(p) << " " << r.body << r.error;
      where_of[json::parse(r.body)["data"]["operationId"].get<std::string>()] = p;
    }
  }
  for (const auto& [id, p] : where_of) {
    auto c = env.wait_for_phase(id, "VALIDATED", std::chrono::seconds(180));
    ASSERT_EQ(c["phase"], "VALIDATED") << c.dump(2);
    EXPECT_EQ(c["repository"], p.repository) << c.dump(2);
    EXPECT_EQ(c["targetBranch"], p.branch) << c.dump(2);
    EXPECT_TRUE(is_subsequence({"BATCH_WAITING", "BATCH_CLAIMED", "BATCH_MERGED", "CALLED_BACK"}, timeline_steps(c)))
        << c.dump(2);
  }

  auto log = json::parse(env.sim_call("GET", "/_sim/requests").body);
  ASSERT_FALSE(log["truncated"].get<bool>());
  const auto& requests = log["requests"];
  // Batch MR lives, from the log alone.
  std::map<std::pair<std::string, std::int64_t>, mr_life> lives;  // (project, iid)
  std::vector<json> batch_creates;                                // every create attempt, refused ones too
  for (const auto& e : requests) {
    const auto source = e["sourceBranch"].get<std::string>();
    if (source.rfind("changeflow/batch-", 0) != 0) continue;
    const auto project = e["project"].get<std::string>();
    const auto iid = e["iid"].get<std::int64_t>();
    if (e["endpoint"] == "create_mr") {
      batch_creates.push_back(e);
      if (iid != 0) {  // the create opened this MR (its answer may have been lost)
        lives[{project, iid}] = {{project, e["targetBranch"].get<std::string>()}, source, iid, e["seq"], 0};
      }
      continue;
    }
    auto it = lives.find({project, iid});
    if (it == lives.end() || it->second.ended) continue;
    if (e["mrState"] == "merged" || e["mrState"] == "closed") it->second.ended = e["seq"];
  }
  ASSERT_FALSE(lives.empty());
  std::map<place, std::vector<mr_life>> by_partition;
  for (const auto& [key, life] : lives) {
    EXPECT_NE(life.ended, 0u) << "batch MR !" << life.iid << " of " << str(life.where) << " never ended";
    by_partition[life.where].push_back(life);
  }
  // Every partition batched, each in several MRs (max_members 2).
  for (const auto& p : partitions) {
    EXPECT_GE(by_partition[p].size(), 3u) << str(p);
  }
  // One partition: its batch MRs were never open at the same time, and no create was even
  // attempted for another batch branch of the partition while one was open.
  for (auto& [p, list] : by_partition) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.opened < b.opened; });
    for (std::size_t i = 1; i < list.size(); ++i) {
      EXPECT_GT(list[i].opened, list[i - 1].ended)
          << str(p) << ": MR !" << list[i].iid << " opened while !" << list[i - 1].iid << " was open";
    }
    for (const auto& create : batch_creates) {
      const place at{create["project"].get<std::string>(), create["targetBranch"].get<std::string>()};
      if (!(at == p)) continue;
      for (const auto& life : list) {
        const auto seq = create["seq"].get<std::uint64_t>();
        if (create["sourceBranch"] != life.source && seq > life.opened && seq < life.ended) {
          ADD_FAILURE() << str(p) << ": create of " << create["sourceBranch"] << " attempted while !" << life.iid
                        << " (" << life.source << ") was open";
        }
      }
    }
  }
  // Different partitions: batch MRs were open at the same time.
  int overlapping_pairs = 0;
  for (auto a = by_partition.begin(); a != by_partition.end(); ++a) {
    for (auto b = std::next(a); b != by_partition.end(); ++b) {
      for (const auto& x : a->second) {
        for (const auto& y : b->second) {
          if (x.opened < y.ended && y.opened < x.ended) ++overlapping_pairs;
        }
      }
    }
  }
  EXPECT_GT(overlapping_pairs, 0) << "no two partitions ever had batch MRs open at the same time";
  std::cout << "batch MRs " << lives.size() << " in " << by_partition.size() << " partitions, create attempts "
            << batch_creates.size() << ", cross-partition overlapping pairs " << overlapping_pairs << "\n";

  // Each batch MR went to its batch's project and branch, and carried only members of that partition.
  auto batches = env.db().query("SELECT id, repository, target_branch, mr_iid FROM merge_batch WHERE status = 2");
  ASSERT_FALSE(batches.empty());
  for (const auto& row : batches) {
    const std::string source = "changeflow/batch-" + row[0];
    int creates = 0;
    for (const auto& create : batch_creates) {
      if (create["sourceBranch"] != source) continue;
      ++creates;
      EXPECT_EQ(create["project"], row[1]) << source;
      EXPECT_EQ(create["targetBranch"], row[2]) << source;
    }
    EXPECT_GE(creates, 1) << source;
    EXPECT_TRUE(lives.count({row[1], std::stoll(row[3])})) << source << " merged MR !" << row[3] << " not in the log";
    EXPECT_EQ(
        env.db().scalar("SELECT COUNT(*) FROM merge_batch_history h JOIN operation o ON o.operation_id = "
                        "h.operation_id WHERE h.event = 'CLAIMED' AND h.batch_id = " +
                        row[0] + " AND (o.repository <> '" + row[1] + "' OR o.target_branch <> '" + row[2] + "')"),
        "0")
        << source;
  }
  // Every GitLab request of the run went to a configured project (a 404 is still legal: a branch is
  // looked up before it is created).
  const std::set<std::string> configured = {"team/alpha", "team/beta", "team/gamma"};
  std::map<std::string, int> per_project;
  for (const auto& e : requests) {
    EXPECT_TRUE(configured.count(e["project"].get<std::string>())) << e.dump();
    ++per_project[e["project"].get<std::string>()];
  }
  EXPECT_EQ(per_project.size(), configured.size());
  EXPECT_EQ(repeated_side_effects(sim_stats(env)), "");
}

TEST(Repositories, SameTargetInTwoRepositoriesIsTwoTargetsUnknownRepositoryOrBranchIs400AndWritesNothing) {
  json cfg = repositories_config();
  cfg["batch"]["enabled"] = false;
  flow_env env(cfg, sim_projects());
  // The same subject and target in two repositories: two independent targets, both in flight.
  auto a = submit_to(env, {"team/alpha", "main"}, "team-x", "shared");
  auto b = submit_to(env, {"team/beta", "main"}, "team-x", "shared");
  ASSERT_EQ(a.status, 202) << a.body;
  ASSERT_EQ(b.status, 202) << b.body;
  // ... while the same target in the same repository is held (on the other branch too).
  auto held = submit_to(env, {"team/beta", "release"}, "team-x", "shared");
  EXPECT_EQ(held.status, 409) << held.body;

  const std::vector<std::pair<std::string, json>> refused = {
      {"unknown repository", {{"repository", "team/nope"}, {"targetBranch", "main"}}},
      {"unknown branch", {{"repository", "team/beta"}, {"targetBranch", "develop"}}},
      {"branch of another repository", {{"repository", "team/alpha"}, {"targetBranch", "release"}}},
      {"no repository with several configured", json::object()},
      {"repository with several branches and none named", {{"repository", "team/beta"}}},
      {"repository not a string", {{"repository", 7}, {"targetBranch", "main"}}},
  };
  int n = 0;
  for (const auto& [why, fields] : refused) {
    const auto subject = "bad-" + std::to_string(n++);
    json body = {{"subject", subject},
                 {"target", "t"},
                 {"title", why},
                 {"files", {{{"path", "config/t.yaml"}, {"content", "v: 1\n"}}}}};
    for (auto& [k, v] : fields.items()) body[k] = v;
    auto r = http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump(),
                       {{"Idempotency-Key", "key-" + subject}});
    EXPECT_EQ(r.status, 400) << why << ": " << r.body;
    auto j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.body;
    EXPECT_EQ(j["code"], "BAD_REQUEST") << why << ": " << r.body;
    const auto message = j["message"].get<std::string>();
    EXPECT_TRUE(message.find("repository") != std::string::npos || message.find("targetBranch") != std::string::npos)
        << why << ": " << message;
    EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation WHERE subject_id = '" + subject + "'"), "0") << why;
    EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM binding WHERE subject_id = '" + subject + "'"), "0") << why;
    EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM idempotency_record WHERE idem_key LIKE '%key-" + subject + "'"),
              "0")
        << why;
  }
  // The choices are named: a client can correct itself from the message alone.
  auto r = submit_to(env, {"team/beta", "develop"}, "bad-x", "t");
  EXPECT_NE(r.body.find("release"), std::string::npos) << r.body;
  // Nothing of the refused submissions reached GitLab: only the two accepted changes' projects.
  auto log = json::parse(env.sim_call("GET", "/_sim/requests").body);
  for (const auto& e : log["requests"]) {
    EXPECT_TRUE(e["project"] == "team/alpha" || e["project"] == "team/beta") << e.dump();
  }
}
