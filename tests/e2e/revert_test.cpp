// Reverting a VALIDATED change with a new change, against changeflow-sim's per-branch files: the
// revert restores each file's content at the original's base (a file the original created is
// deleted), goes through its own approval and lifecycle, and is pinned to the target as it was when
// the revert was asked for. What the service attempted is read from the sim's request log (commit
// actions, approval submissions), what it finished from the target branch and both status documents.

#include "tests/support/flow_env.hpp"
#include "tests/support/sim_attempts.hpp"
#include "tests/support/sim_repository.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

http_result revert(flow_env& env, const std::string& id, const std::string& key = {}, const std::string& body = {}) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (!key.empty()) headers.emplace_back("Idempotency-Key", key);
  return http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes/" + id + "/revert", body, headers);
}

json body_of(const http_result& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

/// The causes of a change's timeline, oldest first.
std::vector<std::string> causes(const json& change) {
  std::vector<std::string> out;
  for (const auto& e : change.value("timeline", json::array())) out.push_back(e.value("cause", ""));
  return out;
}

std::string revert_count(flow_env& env, const std::string& original) {
  return env.db().scalar("SELECT COUNT(*) FROM operation WHERE revert_of = '" + original + "'");
}

/// A change that updates `updated` (seeded on main first) and creates `created`, validated.
struct validated_change {
  std::string id;
  repo_file before;  // `updated` as main held it before the change
};
validated_change change_two_files(flow_env& env, const std::string& title, const std::string& target,
                                  const std::string& updated, const std::string& created) {
  validated_change c;
  c.before = seed_repo_file(env, updated, "limit: 1\n");
  c.id = submit_files(env, title, target,
                      json::array({file_change(updated, "limit: 2\n", "update", c.before.last_commit_id),
                                   file_change(created, "extra: true\n", "create")}));
  EXPECT_EQ(env.wait_for_phase(c.id, "VALIDATED")["phase"], "VALIDATED") << c.id;
  return c;
}

}  // namespace

// The whole round trip: a change creates one file and updates another, is validated and reverted;
// the revert is its own change (own approval request, own branch and MR), reaches VALIDATED, and
// main then holds exactly the old content while the created file is gone. A retry with the same key
// replays the 202; any other revert of the change is 409 ALREADY_REVERTED and writes nothing.
TEST(Revert, RestoresThePreviousContentsAndLinksBothChanges) {
  flow_env env;
  const std::string updated = "config/revert-updated.yaml";
  const std::string created = "config/revert-created.yaml";
  auto original = change_two_files(env, "raise the limit", "revert-round-trip", updated, created);
  ASSERT_FALSE(original.id.empty());
  auto updated_now = read_repo_file(env, updated);
  auto created_now = read_repo_file(env, created);
  ASSERT_TRUE(updated_now && created_now);
  ASSERT_EQ(updated_now->content, "limit: 2\n");

  auto r = revert(env, original.id, "revert-round-trip-1");
  ASSERT_EQ(r.status, 202) << r.body;
  auto accepted = body_of(r);
  EXPECT_EQ(accepted["code"], "ACCEPTED");
  const auto revert_id = accepted["data"]["operationId"].get<std::string>();
  EXPECT_NE(revert_id, original.id);
  EXPECT_EQ(accepted["data"]["revertOf"], original.id);
  EXPECT_EQ(accepted["data"]["statusUrl"], "/api/v1/changes/" + revert_id);

  // The same key again: the stored answer, byte for byte.
  auto replay = revert(env, original.id, "revert-round-trip-1");
  EXPECT_EQ(replay.status, 202) << replay.body;
  EXPECT_EQ(replay.body, r.body);
  EXPECT_EQ(replay.header("idempotent-replayed"), "true");
  // Another key, or none, while the revert is in flight: refused, naming the revert.
  for (const auto& key : {std::string("revert-round-trip-2"), std::string()}) {
    auto second = revert(env, original.id, key);
    EXPECT_EQ(second.status, 409) << second.body;
    auto j = body_of(second);
    EXPECT_EQ(j["code"], "ALREADY_REVERTED") << second.body;
    EXPECT_EQ(j["data"]["revertOperationId"], revert_id) << second.body;
  }

  auto done = env.wait_for_phase(revert_id, "VALIDATED");
  ASSERT_EQ(done["phase"], "VALIDATED") << done.dump(2);
  EXPECT_EQ(done["title"], "Revert: raise the limit");
  EXPECT_EQ(done["subject"], "alice");
  EXPECT_EQ(done["target"], "revert-round-trip");

  // Main holds exactly the old content; the created file is gone.
  auto restored = read_repo_file(env, updated);
  ASSERT_TRUE(restored);
  EXPECT_EQ(restored->content, "limit: 1\n");
  EXPECT_FALSE(read_repo_file(env, created)) << "the file the change created is deleted";

  // What the revert attempted: one commit on its own branch, each action based on main's version
  // of the file when the revert was asked for; its own approval request; and a validated revert is
  // still refused (it took effect).
  auto stats = sim_stats(env);
  EXPECT_EQ(commit_actions(stats, "changeflow/" + revert_id),
            (std::vector<std::string>{"update " + updated + " @" + updated_now->last_commit_id,
                                      "delete " + created + " @" + created_now->last_commit_id}));
  EXPECT_GE(attempts(stats, "approval_submit", revert_id), 1u);
  EXPECT_EQ(repeated_side_effects(stats), "");
  auto after = revert(env, original.id, "revert-round-trip-3");
  EXPECT_EQ(after.status, 409) << after.body;
  EXPECT_EQ(body_of(after)["code"], "ALREADY_REVERTED");
  EXPECT_EQ(revert_count(env, original.id), "1") << "the refused reverts wrote nothing";

  // Linked both ways, and each timeline names the other.
  auto orig = env.get_change(original.id);
  EXPECT_EQ(orig["revertedBy"], revert_id);
  EXPECT_TRUE(orig["revertOf"].is_null());
  EXPECT_EQ(done["revertOf"], original.id);
  EXPECT_TRUE(done["revertedBy"].is_null());
  auto orig_causes = causes(orig);
  ASSERT_FALSE(orig_causes.empty());
  EXPECT_EQ(orig_causes.back(), "reverted by " + revert_id) << orig.dump(2);
  EXPECT_EQ(orig["timeline"].back()["to"], "CALLED_BACK") << "the original stays validated";
  EXPECT_EQ(orig["phase"], "VALIDATED");
  auto revert_causes = causes(done);
  ASSERT_FALSE(revert_causes.empty());
  EXPECT_NE(revert_causes.front().find("revert of " + original.id), std::string::npos) << done.dump(2);
}

// Only a VALIDATED change can be reverted; nothing is written for a refusal, and GitLab that
// cannot be read answers 503 with Retry-After, writes nothing (no row, no idempotency record), and
// a retry with the same key then runs afresh.
TEST(Revert, RefusalsWriteNothing) {
  flow_env env;
  auto rejected = submit_files(env, "[reject] not wanted", "revert-refused",
                               json::array({file_change("config/revert-refused.yaml", "x: 1\n")}));
  ASSERT_EQ(env.wait_for_phase(rejected, "REJECTED")["phase"], "REJECTED");
  const auto rows_before = env.db().scalar("SELECT COUNT(*) FROM operation");
  auto r = revert(env, rejected, "revert-refused-1");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(body_of(r)["code"], "CONFLICT");
  EXPECT_NE(body_of(r)["message"].get<std::string>().find("Only a VALIDATED change can be reverted"), std::string::npos)
      << r.body;
  EXPECT_EQ(revert(env, "00000000-0000-4000-8000-000000000000").status, 404);
  EXPECT_EQ(revert(env, rejected, {}, R"({"files": []})").status, 400) << "a revert takes its files from the change";

  const std::string path = "config/revert-unreadable.yaml";
  auto original = change_two_files(env, "unreadable later", "revert-unreadable", path, path + ".new");
  const auto before = env.db().scalar("SELECT COUNT(*) FROM operation");
  env.add_fault({{"kind", "status"}, {"endpoint", "get_file"}, {"match", path}, {"status", 503}, {"count", -1}});
  auto down = revert(env, original.id, "revert-unreadable-1");
  EXPECT_EQ(down.status, 503) << down.body;
  EXPECT_EQ(body_of(down)["code"], "UNAVAILABLE");
  EXPECT_FALSE(down.header("retry-after").empty()) << down.body;
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation"), before);
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM idempotency_record"), "0");
  EXPECT_TRUE(env.get_change(original.id)["revertedBy"].is_null());
  EXPECT_GE(sim_stats(env)["requests"].value("get_file", 0), 1) << "the failure was GitLab's read, not a refusal";

  ASSERT_EQ(env.sim_call("DELETE", "/_sim/faults").status, 200);
  auto retried = revert(env, original.id, "revert-unreadable-1");
  EXPECT_EQ(retried.status, 202) << retried.body;
  EXPECT_TRUE(retried.header("idempotent-replayed").empty()) << "the 503 was not stored for replay";
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation"), std::to_string(std::stoi(before) + 1));
  EXPECT_EQ(before, std::to_string(std::stoi(rows_before) + 1)) << "the refused revert wrote no row";
}

// The revert is pinned to main as it was when it was asked for: an edit that lands before the
// revert's commit ends it CONTENT_CONFLICT and stays. That revert has not ended (it awaits its
// requester), so the original cannot be reverted again; once it is cancelled -- ended without
// taking effect -- a new revert is accepted and the original names the newer one.
TEST(Revert, ALaterEditEndsTheRevertContentConflictInsteadOfBeingOverwritten) {
  flow_env env;
  const std::string updated = "config/revert-pinned.yaml";
  auto original = change_two_files(env, "pinned", "revert-pinned", updated, "config/revert-pinned-new.yaml");
  auto at_revert = read_repo_file(env, updated);
  ASSERT_TRUE(at_revert);
  // The revert's approval takes a while, so the outside edit lands before the revert's commit.
  env.add_fault({{"kind", "approval_callback"}, {"mode", "delay"}, {"delay_ms", 2000}, {"match", "Revert: pinned"}});
  auto r = revert(env, original.id);
  ASSERT_EQ(r.status, 202) << r.body;
  const auto first = body_of(r)["data"]["operationId"].get<std::string>();
  commit_outside(env, "update", updated, "limit: outside\n");

  auto ended = wait_settled(env, first);
  EXPECT_EQ(ended["step"]["name"], "CONTENT_CONFLICT") << ended.dump(2);
  EXPECT_EQ(read_repo_file(env, updated)->content, "limit: outside\n") << "the later edit stays";
  auto stats = sim_stats(env);
  auto actions = commit_actions(stats, "changeflow/" + first);
  ASSERT_FALSE(actions.empty());
  EXPECT_EQ(actions.front(), "update " + updated + " @" + at_revert->last_commit_id);
  EXPECT_EQ(total_attempts(stats, "merge"), 1u) << "only the original merged";

  auto blocked = revert(env, original.id);
  EXPECT_EQ(blocked.status, 409) << blocked.body;
  EXPECT_EQ(body_of(blocked)["code"], "ALREADY_REVERTED");

  auto cancel = http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes/" + first + "/cancel", "{}");
  ASSERT_EQ(cancel.status, 200) << cancel.body;
  auto again = revert(env, original.id);
  ASSERT_EQ(again.status, 202) << again.body;
  const auto second = body_of(again)["data"]["operationId"].get<std::string>();
  EXPECT_NE(second, first);
  auto orig = env.get_change(original.id);
  EXPECT_EQ(orig["revertedBy"], second);
  auto c = causes(orig);
  EXPECT_EQ(std::count(c.begin(), c.end(), "reverted by " + first), 1);
  EXPECT_EQ(std::count(c.begin(), c.end(), "reverted by " + second), 1);
  EXPECT_EQ(env.get_change(first)["revertOf"], original.id) << "the ended revert keeps its link";
}

// With several repositories configured (and the sim serving each as its own project, with its own
// files and MR numbers), a revert goes where the change it reverts went: it carries the original's
// repository and target branch, reads the original's MR and files in that project, commits and
// merges there, and restores the files on that branch only; the same path in another project or on
// another branch of the same project is left as it was. Judged on the sim's request log: every
// GitLab request the revert caused names the original's project. Once the original's branch is no
// longer configured, a revert of a change there is refused before anything is read or written.
TEST(Revert, GoesToTheOriginalsRepositoryAndBranch) {
  const json config = {
      {"repositories",
       {{"config/changes", {{"branches", {"main"}}}}, {"team/beta", {{"branches", {"main", "release"}}}}}}};
  flow_env env(config, {"--projects", "config/changes=main;team/beta=main,release"});
  const sim_place release{"team/beta", "release"};
  const sim_place beta_main{"team/beta", "main"};
  const sim_place other{"config/changes", "main"};
  const std::string updated = "config/revert-placed.yaml";
  const std::string created = "config/revert-placed-new.yaml";
  // The same path elsewhere, with other contents: a revert in the wrong place would touch it.
  seed_repo_file(env, updated, "limit: other project\n", other);
  seed_repo_file(env, updated, "limit: other branch\n", beta_main);
  const auto before = seed_repo_file(env, updated, "limit: 1\n", release);

  auto original = submit_files(env, "raise the release limit", "revert-placed",
                               json::array({file_change(updated, "limit: 2\n", "update", before.last_commit_id),
                                            file_change(created, "extra: true\n", "create")}),
                               release);
  ASSERT_FALSE(original.empty());
  // A second change on the branch, reverted after the branch left the configuration.
  auto stranded =
      submit_files(env, "another release setting", "revert-stranded",
                   json::array({file_change("config/revert-stranded.yaml", "on: true\n", "create")}), release);
  ASSERT_FALSE(stranded.empty());
  auto validated = env.wait_for_phase(original, "VALIDATED");
  ASSERT_EQ(validated["phase"], "VALIDATED") << validated.dump(2);
  ASSERT_EQ(validated["repository"], "team/beta");
  ASSERT_EQ(validated["targetBranch"], "release");
  auto updated_now = read_repo_file(env, updated, release);
  auto created_now = read_repo_file(env, created, release);
  ASSERT_TRUE(updated_now && created_now);
  ASSERT_EQ(updated_now->content, "limit: 2\n");
  const auto log_before = json::parse(env.sim_call("GET", "/_sim/requests").body)["requests"].size();

  auto r = revert(env, original, "revert-placed-1");
  ASSERT_EQ(r.status, 202) << r.body;
  const auto revert_id = body_of(r)["data"]["operationId"].get<std::string>();
  auto done = env.wait_for_phase(revert_id, "VALIDATED");
  ASSERT_EQ(done["phase"], "VALIDATED") << done.dump(2);
  EXPECT_EQ(done["repository"], "team/beta");
  EXPECT_EQ(done["targetBranch"], "release");
  EXPECT_EQ(done["revertOf"], original);
  EXPECT_EQ(env.get_change(original)["revertedBy"], revert_id);

  // What the revert attempted: its reads, commit, MR and merge all in the original's project, its
  // MR into the original's branch, its commit pinned to the release branch's versions.
  auto log = json::parse(env.sim_call("GET", "/_sim/requests").body);
  ASSERT_FALSE(log["truncated"].get<bool>());
  const auto& requests = log["requests"];
  ASSERT_GT(requests.size(), log_before);
  std::size_t mr_creates = 0, file_reads = 0;
  for (std::size_t i = log_before; i < requests.size(); ++i) {
    const auto& e = requests[i];
    EXPECT_EQ(e["project"], "team/beta") << e.dump();
    if (e["endpoint"] == "create_mr") {
      ++mr_creates;
      EXPECT_EQ(e["sourceBranch"], "changeflow/" + revert_id) << e.dump();
      EXPECT_EQ(e["targetBranch"], "release") << e.dump();
    }
    if (e["endpoint"] == "get_file") ++file_reads;
  }
  EXPECT_GE(mr_creates, 1u);
  EXPECT_GE(file_reads, 4u) << "each file at the original's base and on the release branch";
  EXPECT_EQ(commit_actions(sim_stats(env), "changeflow/" + revert_id, "team/beta"),
            (std::vector<std::string>{"update " + updated + " @" + updated_now->last_commit_id,
                                      "delete " + created + " @" + created_now->last_commit_id}));

  // What it finished: the release branch holds the old content and lost the created file; the same
  // path in the other project and on the other branch is untouched.
  auto restored = read_repo_file(env, updated, release);
  ASSERT_TRUE(restored);
  EXPECT_EQ(restored->content, "limit: 1\n");
  EXPECT_FALSE(read_repo_file(env, created, release));
  EXPECT_EQ(read_repo_file(env, updated, beta_main)->content, "limit: other branch\n");
  EXPECT_EQ(read_repo_file(env, updated, other)->content, "limit: other project\n");

  ASSERT_EQ(env.wait_for_phase(stranded, "VALIDATED")["phase"], "VALIDATED");
  env.restart_service({{"repositories", {{"team/beta", {{"branches", {"main"}}}}}}});
  const auto rows = env.db().scalar("SELECT COUNT(*) FROM operation");
  const auto log_at_refusal = json::parse(env.sim_call("GET", "/_sim/requests").body)["requests"].size();
  auto refused = revert(env, stranded, "revert-stranded-1");
  EXPECT_EQ(refused.status, 409) << refused.body;
  EXPECT_EQ(body_of(refused)["code"], "CONFLICT") << refused.body;
  EXPECT_NE(refused.body.find("release"), std::string::npos) << "the message names the branch: " << refused.body;
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation"), rows) << "nothing written";
  EXPECT_TRUE(env.get_change(stranded)["revertedBy"].is_null());
  const auto after_refusal = json::parse(env.sim_call("GET", "/_sim/requests").body)["requests"];
  for (std::size_t i = log_at_refusal; i < after_refusal.size(); ++i) {
    EXPECT_NE(after_refusal[i]["endpoint"], "get_file")
        << "the refused revert read GitLab: " << after_refusal[i].dump();
  }
}
