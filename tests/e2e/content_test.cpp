// Safe file content against changeflow-sim's per-branch files: a change never commits or merges over
// a version of a file it was not based on (it ends CONTENT_CONFLICT instead), and `upsert` picks
// create or update from what the branch holds. The files are read back from the sim's repository
// files API, and what the service attempted from its request log (commit actions, merges).

#include "tests/support/flow_env.hpp"
#include "tests/support/sim_attempts.hpp"
#include "tests/support/sim_repository.hpp"

#include <gtest/gtest.h>

#include <map>
#include <thread>

using namespace changeflow::testing;
using nlohmann::json;

namespace {

/// Waits until change `id` has its MR (its commit made, its pipeline running), commits `action` of
/// `path` to main from outside changeflow, and returns the change once it has settled.
json settled_after_outside_commit(flow_env& env, const std::string& id, const std::string& action,
                                  const std::string& path, const std::string& content) {
  auto opened = env.wait_for_step(id, "CREATE_MR_OPENED");
  EXPECT_EQ(opened["step"]["name"], "CREATE_MR_OPENED") << opened.dump(2);
  commit_outside(env, action, path, content);
  return wait_settled(env, id);
}

}  // namespace

// Two changes (two targets) edit one file, both based on the same version of it, submitted at the
// same moment. Whichever reaches GitLab second ends CONTENT_CONFLICT -- refused by GitLab at its
// commit, or stopped by the check before its merge, depending on how the two interleave -- and the
// first one's content is what main holds. Breaking either guard (no last_commit_id on the commit
// actions, or no check before the merge) lets both merge, and the second overwrites the first.
TEST(Content, TwoChangesBasedOnOneVersionCannotBothWin) {
  flow_env env;
  const std::string path = "config/shared-limits.yaml";
  const auto base = seed_repo_file(env, path, "limit: 1\n");

  std::string a, b;
  std::thread ta([&] {
    a = submit_files(env, "limit two", "limits-a",
                     json::array({file_change(path, "limit: 2\n", "update", base.last_commit_id)}));
  });
  std::thread tb([&] {
    b = submit_files(env, "limit three", "limits-b",
                     json::array({file_change(path, "limit: 3\n", "update", base.last_commit_id)}));
  });
  ta.join();
  tb.join();
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  auto ca = wait_settled(env, a);
  auto cb = wait_settled(env, b);
  const bool a_won = ca["phase"] == "VALIDATED";
  const auto& winner = a_won ? ca : cb;
  const auto& loser = a_won ? cb : ca;
  ASSERT_EQ(winner["phase"], "VALIDATED") << ca.dump(2) << cb.dump(2);
  ASSERT_EQ(loser["step"]["name"], "CONTENT_CONFLICT") << loser.dump(2);
  EXPECT_EQ(loser["phase"], "CREATE_FAILED");
  EXPECT_EQ(loser["hint"], "REBASE_AND_RESUBMIT");
  EXPECT_EQ(loser["hintMessage"],
            "the file changed since your change was based on it: rebase your change and submit again");

  // The winner's content is intact on main; only the winner's MR merged. The loser may have asked
  // for a merge in the window between its check and its merge call (GitLab refused it: the target
  // had moved); then it checked again, and its MR was closed, never rebased over the winner.
  auto now = read_repo_file(env, path);
  ASSERT_TRUE(now);
  EXPECT_EQ(now->content, a_won ? "limit: 2\n" : "limit: 3\n");
  auto stats = sim_stats(env);
  ASSERT_TRUE(winner["mrIid"].is_number());
  const auto winner_mr = "config/changes!" + std::to_string(winner["mrIid"].get<int>());
  EXPECT_EQ(stats["merges"], json({{winner_mr, 1}})) << stats.dump();
  EXPECT_EQ(attempts(stats, "merge", winner_mr), 1u);
  EXPECT_EQ(stats["requests"].value("rebase", 0), 0) << stats["requests"].dump();
  if (loser["mrIid"].is_number()) {
    EXPECT_EQ(attempts(stats, "close", "config/changes!" + std::to_string(loser["mrIid"].get<int>())), 1u);
  }
  // Both commits carried the base the users named.
  for (const auto& id : {a, b}) {
    auto actions = commit_actions(stats, "changeflow/" + id);
    for (const auto& line : actions) EXPECT_EQ(line, "update " + path + " @" + base.last_commit_id) << id;
  }
  // The target of the loser is held until its requester cancels it; then the rebased change goes in.
  auto cancel = http_call("127.0.0.1", env.port(), "POST",
                          "/api/v1/changes/" + loser["operationId"].get<std::string>() + "/cancel", "{}");
  EXPECT_EQ(cancel.status, 200) << cancel.body;
  auto rebased = submit_files(env, "limit four, rebased", loser["target"].get<std::string>(),
                              json::array({file_change(path, "limit: 4\n", "update", now->last_commit_id)}));
  EXPECT_EQ(env.wait_for_phase(rebased, "VALIDATED")["phase"], "VALIDATED");
  EXPECT_EQ(read_repo_file(env, path)->content, "limit: 4\n");
}

// A change that names no base is based on main as it is when the change first reaches GitLab; an
// edit landing on main after that (here: between the change's commit and its merge, while its
// pipeline runs) stops it before the merge, and the outside edit stays.
TEST(Content, AnEditAfterTheCapturedBaseStopsTheMerge) {
  // A long pipeline keeps the change between its commit and its merge while main moves.
  flow_env env(json::object(), {"--pipeline-duration-ms", "4000"});
  const std::string path = "config/captured-base.yaml";
  commit_outside(env, "create", path, "mode: a\n");
  auto id = submit_files(env, "mode b", "captured", json::array({file_change(path, "mode: b\n", "update")}));
  auto c = settled_after_outside_commit(env, id, "update", path, "mode: outside\n");
  EXPECT_EQ(c["step"]["name"], "CONTENT_CONFLICT") << c.dump(2);
  EXPECT_EQ(read_repo_file(env, path)->content, "mode: outside\n");
  auto stats = sim_stats(env);
  EXPECT_EQ(total_attempts(stats, "merge"), 0u) << stats["attempts"].dump();
  // The MR that must never merge was closed.
  ASSERT_TRUE(c["mrIid"].is_number());
  EXPECT_EQ(attempts(stats, "close", "config/changes!" + std::to_string(c["mrIid"].get<int>())), 1u);
}

// A file the change's own commit created was absent at the commit its branch started from, so the
// check before the merge reads only main's version of it while the MR's base is that commit (one
// read of the file per change instead of two); and main gaining that file after the commit still
// stops the merge.
TEST(Content, AFileTheChangeCreatedIsReadOnceBeforeTheMergeAndStillGuarded) {
  {
    flow_env env;
    const std::string path = "config/created-here.yaml";
    auto id = submit_files(env, "new file", "created", json::array({file_change(path, "n: 1\n", "create")}));
    EXPECT_EQ(env.wait_for_phase(id, "VALIDATED")["phase"], "VALIDATED");
    auto stats = sim_stats(env);
    // `create` needs no read before the commit; before the merge only main's version is read.
    EXPECT_EQ(stats["requests"].value("get_file", 0), 1) << stats["requests"].dump();
    EXPECT_EQ(read_repo_file(env, path)->content, "n: 1\n");
  }
  // A long pipeline keeps the change between its commit and its merge while main gains the file.
  flow_env env(json::object(), {"--pipeline-duration-ms", "4000"});
  const std::string path = "config/created-twice.yaml";
  auto id = submit_files(env, "new file", "created-twice", json::array({file_change(path, "mine\n", "create")}));
  auto c = settled_after_outside_commit(env, id, "create", path, "theirs\n");
  EXPECT_EQ(c["step"]["name"], "CONTENT_CONFLICT") << c.dump(2);
  EXPECT_EQ(read_repo_file(env, path)->content, "theirs\n");
  EXPECT_EQ(total_attempts(sim_stats(env), "merge"), 0u);
}

// The same for a file the change's commit updated: GitLab accepted the update only because the
// file's last commit at the branch's start was the base the update named, so before the merge only
// main's version is read. With the base named by the client there is no read before the commit;
// with none, the one read that captured it. An edit on main after the commit still stops the merge
// (AnEditAfterTheCapturedBaseStopsTheMerge).
TEST(Content, AFileTheChangeUpdatedIsReadOnceBeforeTheMerge) {
  flow_env env;
  const std::string path = "config/updated-here.yaml";
  const auto base = seed_repo_file(env, path, "n: 1\n");
  const auto file_reads = [&env] { return sim_stats(env)["requests"].value("get_file", 0); };
  const int before = file_reads();
  auto named = submit_files(env, "named base", "updated-named",
                            json::array({file_change(path, "n: 2\n", "update", base.last_commit_id)}));
  EXPECT_EQ(env.wait_for_phase(named, "VALIDATED")["phase"], "VALIDATED");
  EXPECT_EQ(file_reads() - before, 1) << sim_stats(env)["requests"].dump();
  const int after_named = file_reads();
  auto captured = submit_files(env, "captured base", "updated-captured", json::array({file_change(path, "n: 3\n")}));
  EXPECT_EQ(env.wait_for_phase(captured, "VALIDATED")["phase"], "VALIDATED");
  EXPECT_EQ(file_reads() - after_named, 2) << sim_stats(env)["requests"].dump();
  EXPECT_EQ(read_repo_file(env, path)->content, "n: 3\n");
}

// upsert: create when main has no such file, update (with the file's last commit as its base) once
// it does; the sim's request log shows which action each commit carried.
TEST(Content, UpsertPicksCreateThenUpdate) {
  flow_env env;
  const std::string path = "config/upserted.yaml";
  auto first = submit_files(env, "upsert one", "upsert", json::array({file_change(path, "n: 1\n", "upsert")}));
  EXPECT_EQ(env.wait_for_phase(first, "VALIDATED")["phase"], "VALIDATED");
  auto after_first = read_repo_file(env, path);
  ASSERT_TRUE(after_first);
  EXPECT_EQ(after_first->content, "n: 1\n");
  // No action at all means upsert too.
  auto second = submit_files(env, "upsert two", "upsert", json::array({file_change(path, "n: 2\n")}));
  EXPECT_EQ(env.wait_for_phase(second, "VALIDATED")["phase"], "VALIDATED");
  EXPECT_EQ(read_repo_file(env, path)->content, "n: 2\n");

  auto stats = sim_stats(env);
  EXPECT_EQ(commit_actions(stats, "changeflow/" + first), (std::vector<std::string>{"create " + path}));
  EXPECT_EQ(commit_actions(stats, "changeflow/" + second),
            (std::vector<std::string>{"update " + path + " @" + after_first->last_commit_id}));
}

// Bad content input is refused with a clear 400 and nothing is stored.
TEST(Content, InvalidBasesAreRefused) {
  flow_env env;
  for (const auto& f :
       {file_change("config/x.yaml", "x", "create", std::string(40, 'a')),
        file_change("config/x.yaml", "x", "update", "not-a-commit"), file_change("config/x.yaml", "x", "rename")}) {
    json body = {{"subject", "alice"}, {"target", "bad-base"}, {"title", "bad"}, {"files", {f}}};
    auto r = http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes", body.dump());
    EXPECT_EQ(r.status, 400) << f.dump() << r.body;
  }
  EXPECT_EQ(env.db().scalar("SELECT COUNT(*) FROM operation"), "0");
}

namespace {

http_result preview(flow_env& env, const json& files, const std::string& subject = "alice") {
  json body = {{"subject", subject}, {"target", "preview"}, {"title", "preview"}, {"files", files}};
  return http_call("127.0.0.1", env.port(), "POST", "/api/v1/changes/preview", body.dump());
}

/// Rows in every table of the service's database, by table.
std::map<std::string, std::string> row_counts(flow_env& env) {
  std::map<std::string, std::string> out;
  for (const auto& row :
       env.db().query("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()")) {
    out[row[0]] = env.db().scalar("SELECT COUNT(*) FROM `" + row[0] + "`");
  }
  return out;
}

}  // namespace

// The preview diffs each file against main, answers the base to send, names what a commit would
// refuse, and writes nothing: not a row in any table, not a request that changes anything in GitLab.
TEST(Preview, DiffsAgainstTheTargetAndWritesNothing) {
  flow_env env;
  const std::string path = "config/previewed.yaml";
  const auto base = seed_repo_file(env, path, "a: 1\nb: 2\n");
  auto tables_before = row_counts(env);
  ASSERT_TRUE(tables_before.count("operation")) << "the service's schema is in place";
  auto attempts_before = sim_stats(env)["attempts"];

  auto r = preview(env, json::array({file_change(path, "a: 1\nb: 3\n"), file_change("config/new.yaml", "n: 1\n"),
                                     file_change(path + ".old", "", "delete")}));
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["code"], "OK");
  const auto& d = j["data"];
  EXPECT_EQ(d["valid"], false) << "the delete of a missing file would be refused";
  ASSERT_EQ(d["files"].size(), 3u) << d.dump(2);
  EXPECT_EQ(d["files"][0]["action"], "update");
  EXPECT_EQ(d["files"][0]["exists"], true);
  EXPECT_EQ(d["files"][0]["lastCommitId"], base.last_commit_id);
  EXPECT_EQ(d["files"][0]["diff"], "--- a/" + path + "\n+++ b/" + path + "\n@@ -1,2 +1,2 @@\n a: 1\n-b: 2\n+b: 3\n");
  EXPECT_TRUE(d["files"][0]["problem"].is_null());
  EXPECT_EQ(d["files"][1]["action"], "create");
  EXPECT_EQ(d["files"][1]["exists"], false);
  EXPECT_TRUE(d["files"][1]["lastCommitId"].is_null());
  EXPECT_EQ(d["files"][1]["diff"], "--- /dev/null\n+++ b/config/new.yaml\n@@ -0,0 +1 @@\n+n: 1\n");
  EXPECT_EQ(d["files"][2]["problem"], "the file does not exist");

  // A stale base is named as the conflict it would be.
  auto stale = preview(env, json::array({file_change(path, "a: 9\n", "update", std::string(40, 'b'))}));
  auto sd = json::parse(stale.body)["data"];
  EXPECT_EQ(sd["valid"], false);
  EXPECT_NE(sd["files"][0]["problem"].get<std::string>().find("changed since your change was based on it"),
            std::string::npos);
  // A body a submit would refuse gets the submit's 400, and nothing is read.
  auto invalid = preview(env, json::array({file_change("../escape", "x")}));
  EXPECT_EQ(invalid.status, 400) << invalid.body;

  EXPECT_EQ(row_counts(env), tables_before);
  EXPECT_EQ(sim_stats(env)["attempts"], attempts_before) << "no mutating GitLab request";
  EXPECT_EQ(read_repo_file(env, path)->content, "a: 1\nb: 2\n");
}

// GitLab failing (any read) gives an empty preview with the reason: 200, never a 5xx.
TEST(Preview, GitLabDownAnswersAnEmptyPreviewWithTheReason) {
  flow_env env;
  env.add_fault({{"kind", "status"}, {"endpoint", "get_file"}, {"status", 503}, {"count", -1}});
  auto r = preview(env, json::array({file_change("config/down.yaml", "x: 1\n")}));
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["code"], "OK");
  EXPECT_FALSE(j["data"].contains("files")) << j.dump();
  EXPECT_NE(j["data"]["reason"].get<std::string>().find("GitLab could not be read"), std::string::npos) << j.dump();
  EXPECT_EQ(j["message"], j["data"]["reason"]);
  // Unreachable GitLab (the sim stopped): the same.
  env.sim().process().kill_now();
  auto gone = preview(env, json::array({file_change("config/down.yaml", "x: 1\n")}));
  ASSERT_EQ(gone.status, 200) << gone.body;
  EXPECT_FALSE(json::parse(gone.body)["data"].contains("files"));
}
