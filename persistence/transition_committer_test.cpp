// The group committer on a database pool without threads: the test runs the pool's queued jobs
// itself, so it decides which transitions are waiting when a committer takes its group.
#include "persistence/transition_committer.hpp"

#include "persistence/binding_repo.hpp"
#include "persistence/callback_repo.hpp"
#include "persistence/idempotency_repo.hpp"
#include "persistence/reconcile_repo.hpp"
#include "persistence/repo_test_support.hpp"
#include "persistence/sql_util.hpp"
#include "tests/support/test_db.hpp"

#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

using namespace changeflow;
using namespace changeflow::persistence;
using changeflow::testing::test_database;
using test::new_op;
using S = workflow::step;
using workflow::phase;

namespace {

db_pool idle_pool(const test_database& db, std::size_t capacity) {
  return db_pool("db", 0, capacity, [s = db.settings()] { return std::make_unique<db_context>(s); });
}

/// Counts the completions that were destroyed without having run (their caller's answer guard).
struct unrun_counter {
  std::shared_ptr<int> destroyed_unrun = std::make_shared<int>(0);
  struct token {
    std::shared_ptr<int> count;
    bool ran = false;
    ~token() {
      if (!ran && count) ++*count;
    }
  };
  std::shared_ptr<token> make() {
    auto t = std::make_shared<token>();
    t->count = destroyed_unrun;
    return t;
  }
};

}  // namespace

TEST(TransitionCommitter, TransitionsWaitingTogetherCommitAsOneGroupEachWithItsOutcome) {
  test_database db;
  auto c = db.connect();
  auto pool = idle_pool(db, 100);
  transition_committer committer(pool, 32, 1, 100);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(new_op(*c, "s" + std::to_string(i), "repo/x.yaml"));
  std::vector<db_outcome> outcomes(5, db_outcome::fatal);
  std::vector<std::optional<operation_row>> rows(5);
  for (int i = 0; i < 5; ++i) {
    // The third names a version its row is not at.
    auto req = test::to_approval_sent(ids[static_cast<std::size_t>(i)], i == 2 ? 9 : 1);
    ASSERT_TRUE(committer.submit(
        req, [&outcomes, &rows, i](db_context&, const db_result<std::int64_t>& r, const operation_row* row) {
          outcomes[static_cast<std::size_t>(i)] = r.outcome;
          if (row) rows[static_cast<std::size_t>(i)] = *row;
        }));
  }
  // One committer job for the five (max_committers = 1): it takes them all as one group.
  EXPECT_EQ(pool.stats().queued, 1u);
  db_context ctx(db.settings());
  EXPECT_EQ(committer.stats().busy_us, 0u);
  const auto before_run = std::chrono::steady_clock::now();
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  const auto run_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - before_run);
  // The committer's busy time is the group's round trip and completions: some, never more than the run;
  // the completions' share of it is counted apart, and is less.
  EXPECT_GT(committer.stats().busy_us, 0u);
  EXPECT_LE(committer.stats().busy_us, static_cast<std::uint64_t>(run_us.count()));
  EXPECT_GT(committer.stats().completions_us, 0u);
  EXPECT_LT(committer.stats().completions_us, committer.stats().busy_us);
  EXPECT_EQ(outcomes, (std::vector<db_outcome>{db_outcome::ok, db_outcome::ok, db_outcome::preempted, db_outcome::ok,
                                               db_outcome::ok}));
  // Each landed transition is handed its row as it committed it; the one that missed gets none.
  for (std::size_t i : {0u, 1u, 3u, 4u}) {
    ASSERT_TRUE(rows[i]) << i;
    EXPECT_EQ(rows[i]->operation_id, ids[i]);
    EXPECT_EQ(rows[i]->version, 2);
    EXPECT_EQ(rows[i]->step, S::APPROVAL_SENT);
  }
  EXPECT_FALSE(rows[2]);
  auto st = committer.stats();
  EXPECT_EQ(st.groups, 1u);
  EXPECT_EQ(st.grouped, 5u);
  EXPECT_EQ(st.alone, 0u);
  EXPECT_EQ(st.largest_group, 5u);
  EXPECT_EQ(load_operation(*c, ids[0]).value.step, S::APPROVAL_SENT);
  EXPECT_EQ(load_operation(*c, ids[2]).value.step, S::APPROVAL_SENDING);

  // A transition that finds the committer idle is committed alone, at once.
  bool ran = false;
  ASSERT_TRUE(
      committer.submit(test::to_approval_sent(new_op(*c, "late", "repo/y.yaml"), 1),
                       [&ran](db_context&, const db_result<std::int64_t>& r, const operation_row*) { ran = r.ok(); }));
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_TRUE(ran);
  EXPECT_EQ(committer.stats().alone, 1u);
}

TEST(TransitionCommitter, GroupsAreCappedAndTheRestFormTheNextGroup) {
  test_database db;
  auto c = db.connect();
  auto pool = idle_pool(db, 100);
  transition_committer committer(pool, 3, 1, 100);
  int landed = 0;
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(committer.submit(
        test::to_approval_sent(new_op(*c, "s" + std::to_string(i), "repo/x.yaml"), 1),
        [&landed](db_context&, const db_result<std::int64_t>& r, const operation_row*) { landed += r.ok(); }));
  }
  db_context ctx(db.settings());
  pool.run_queued(ctx);
  EXPECT_EQ(landed, 7);
  auto st = committer.stats();
  EXPECT_EQ(st.groups, 2u);  // 3 + 3, then the seventh alone
  EXPECT_EQ(st.grouped, 6u);
  EXPECT_EQ(st.alone, 1u);
  EXPECT_EQ(st.largest_group, 3u);
}

TEST(TransitionCommitter, ADroppedCommitterJobAnswersEveryWaitingCallerAndTheNextSubmitStillCommits) {
  test_database db;
  auto c = db.connect();
  auto pool = idle_pool(db, 100);
  transition_committer committer(pool, 32, 1, 100);
  unrun_counter counter;
  for (int i = 0; i < 3; ++i) {
    auto token = counter.make();
    ASSERT_TRUE(committer.submit(
        test::to_approval_sent(new_op(*c, "s" + std::to_string(i), "repo/x.yaml"), 1),
        [token](db_context&, const db_result<std::int64_t>&, const operation_row*) { token->ran = true; }));
  }
  ASSERT_TRUE(pool.drop_oldest());  // the committer job dies unrun, as if its thread had
  EXPECT_EQ(*counter.destroyed_unrun, 3);
  EXPECT_EQ(committer.stats().queued, 0u);
  bool ran = false;
  ASSERT_TRUE(
      committer.submit(test::to_approval_sent(new_op(*c, "after", "repo/y.yaml"), 1),
                       [&ran](db_context&, const db_result<std::int64_t>& r, const operation_row*) { ran = r.ok(); }));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_TRUE(ran);
}

TEST(TransitionCommitter, AFullQueueRefusesAtOnceWithoutRunningTheCompletion) {
  test_database db;
  auto c = db.connect();
  // The committer's own queue holds two; the pool refuses any job.
  auto pool = idle_pool(db, 1);
  transition_committer committer(pool, 32, 1, 2);
  ASSERT_TRUE(pool.try_submit([](db_context&) {}));  // the pool is now full
  unrun_counter counter;
  auto token = counter.make();
  bool refused = !committer.submit(
      test::to_approval_sent(new_op(*c, "a", "repo/x.yaml"), 1),
      [token](db_context&, const db_result<std::int64_t>&, const operation_row*) { token->ran = true; });
  EXPECT_TRUE(refused) << "no committer job could start";
  token.reset();
  EXPECT_EQ(*counter.destroyed_unrun, 1) << "refused: the completion is destroyed, never run";
  EXPECT_EQ(committer.stats().queued, 0u);
  db_context ctx(db.settings());
  pool.run_queued(ctx);  // frees the pool
  // Two fit in the committer's queue (one committer job), the third is refused by its capacity.
  auto noop = [](db_context&, const db_result<std::int64_t>&, const operation_row*) {};
  EXPECT_TRUE(committer.submit(test::to_approval_sent(new_op(*c, "b", "repo/x.yaml"), 1), noop));
  EXPECT_TRUE(committer.submit(test::to_approval_sent(new_op(*c, "d", "repo/x.yaml"), 1), noop));
  EXPECT_FALSE(committer.submit(test::to_approval_sent(new_op(*c, "e", "repo/x.yaml"), 1), noop));
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(committer.stats().grouped, 2u);
}

TEST(TransitionCommitter, ACompletionThatThrowsDoesNotStopTheOthersOrTheCommitter) {
  test_database db;
  auto c = db.connect();
  auto pool = idle_pool(db, 100);
  transition_committer committer(pool, 32, 1, 100);
  int answered = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(committer.submit(test::to_approval_sent(new_op(*c, "s" + std::to_string(i), "repo/x.yaml"), 1),
                                 [&answered, i](db_context&, const db_result<std::int64_t>&, const operation_row*) {
                                   if (i == 1) throw std::runtime_error("completion bug");
                                   ++answered;
                                 }));
  }
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(answered, 2) << "the completions after the one that threw still ran";
  EXPECT_EQ(pool.stats().failed, 0u) << "nothing escaped the committer job";
  bool ran = false;
  ASSERT_TRUE(
      committer.submit(test::to_approval_sent(new_op(*c, "after", "repo/y.yaml"), 1),
                       [&ran](db_context&, const db_result<std::int64_t>& r, const operation_row*) { ran = r.ok(); }));
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_TRUE(ran);
}

// -- callbacks that join the group (group_unit)

namespace {

std::string count_events(const test_database& db, const std::string& id) {
  return db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + id + "'");
}

using approval_answer = std::optional<db_result<approval_applied>>;
using deploy_answer = std::optional<db_result<deploy_settlement>>;

std::shared_ptr<group_unit> approve(const std::string& delivery, const std::string& id, approval_answer& out,
                                    const std::optional<approved_then_create>& then = std::nullopt) {
  return approval_callback_unit(
      delivery, id, approval_result::APPROVED, R"({"c":1})",
      [&out](db_context&, const db_result<approval_applied>& r) { out = r; }, then);
}

deploy_callback_in deployed(const std::string& delivery, std::int64_t mr, const std::string& id) {
  deploy_callback_in cb;
  cb.delivery_id = delivery;
  cb.project = "config/changes";
  cb.mr_iid = mr;
  cb.pipeline_id = 7000 + mr;
  cb.status = "success";
  cb.operation_ids_json = "[\"" + id + "\"]";
  return cb;
}

std::shared_ptr<group_unit> deploy(const std::string& delivery, std::int64_t mr, const std::string& id,
                                   deploy_answer& out) {
  return deploy_settle_unit(deployed(delivery, mr, id), "{}", id,
                            [&out](db_context&, const db_result<deploy_settlement>& r) { out = r; });
}

/// An operation with a chosen id (ids decide the order of a group's members).
std::string op_with_id(session c, const std::string& id, const std::string& subject, const std::string& target) {
  auto op = test::new_operation_for(subject, target);
  op.operation_id = id;
  EXPECT_TRUE(create_operation(c, op).ok());
  return id;
}

/// Records what the committer told the unit: whether the group committed with it in it.
std::shared_ptr<group_unit> watched(std::shared_ptr<group_unit> unit, std::optional<bool>& joined) {
  unit->finish = [inner = unit->finish, &joined](db_context& ctx, bool in_group) {
    joined = in_group;
    inner(ctx, in_group);
  };
  return unit;
}

auto count_ok(int& n) {
  return [&n](db_context&, const db_result<std::int64_t>& r, const operation_row*) { n += r.ok() ? 1 : 0; };
}

/// Keeps a transition's outcome and the row it was handed, if any.
auto record(std::optional<db_result<std::int64_t>>& outcome, std::optional<operation_row>& row) {
  return [&outcome, &row](db_context&, const db_result<std::int64_t>& r, const operation_row* handed) {
    outcome = r;
    if (handed) row = *handed;
  };
}

}  // namespace

/// A committer on a pool without threads, as above, for the tests of units joining its groups.
class GroupUnits : public ::testing::Test {
 protected:
  test_database db;
  std::unique_ptr<sql::Connection> c = db.connect();
  db_pool pool = idle_pool(db, 100);
  transition_committer committer{pool, 32, 1, 100};

  /// Two new changes (alice, bob), one waiting for its approval (wanda), one MERGED with MR `mr` (mona).
  struct changes {
    std::string a, b, waiting, merged;
  };
  changes fresh_waiting_and_merged(std::int64_t mr) {
    changes out{new_op(*c, "alice", "repo/a.yaml"), new_op(*c, "bob", "repo/b.yaml"),
                new_op(*c, "wanda", "repo/w.yaml"), new_op(*c, "mona", "repo/m.yaml")};
    test::walk(*c, out.waiting, {S::APPROVAL_SENT});
    test::walk(*c, out.merged, test::to_merged, mr);
    return out;
  }

  /// What a group with a transition of `a` to APPROVAL_SENT, the approval of `waiting`, the deploy
  /// report of `merged` and the creation of `fresh` committed: each written once.
  void expect_written_once(const std::string& a, const std::string& waiting, const std::string& merged,
                           const std::string& fresh) {
    EXPECT_EQ(count_events(db, a), "2") << "created, sent";
    EXPECT_EQ(count_events(db, waiting), "3") << "created, sent, approved";
    EXPECT_EQ(count_events(db, fresh), "1") << "created";
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + merged +
                        "' AND to_phase = 'VALIDATED'"),
              "1");
  }
};

// An approval and a deploy callback that arrive while transitions are committing share their
// commit: one compound statement (one round trip, one transaction) for all four, each with the
// answer it would have had alone, and the ledger rows it would have written.
TEST_F(GroupUnits, CallbacksReadyWithTransitionsCommitInTheirGroup) {
  const auto [a, b, waiting, merged] = fresh_waiting_and_merged(41);
  int landed = 0;
  approval_answer approval;
  deploy_answer deployment;
  ASSERT_TRUE(committer.submit(test::to_approval_sent(a, 1), count_ok(landed)));
  ASSERT_TRUE(committer.submit_unit(approve("apr-cb-1", waiting, approval)));
  ASSERT_TRUE(committer.submit_unit(deploy("dep-1", 41, merged, deployment)));
  ASSERT_TRUE(committer.submit(test::to_approval_sent(b, 1), count_ok(landed)));
  const auto compounds = scripts_sent().compound_texts;
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(scripts_sent().compound_texts - compounds, 1u) << "the four members in one compound statement";
  EXPECT_EQ(landed, 2);
  auto st = committer.stats();
  EXPECT_EQ(st.groups, 1u);
  EXPECT_EQ(st.grouped, 2u);
  EXPECT_EQ(st.units, 2u);

  ASSERT_TRUE(approval && approval->ok()) << (approval ? approval->error.message : "no answer");
  EXPECT_EQ(approval->value.outcome, callback_outcome::APPLIED);
  EXPECT_EQ(approval->value.new_step, S::APPROVAL_APPROVED);
  ASSERT_TRUE(approval->value.row);
  EXPECT_EQ(approval->value.row->step, S::APPROVAL_APPROVED);
  EXPECT_EQ(approval->value.new_version, approval->value.row->version);
  // The row handed back (read with the group's rows at its end) is the stored row, field by field.
  test::expect_same_row(*approval->value.row, load_operation(*c, waiting).value);
  EXPECT_EQ(load_operation(*c, waiting).value.step, S::APPROVAL_APPROVED);
  EXPECT_EQ(db.scalar("SELECT CONCAT(kind, ' ', operation_id, ' ', outcome, ' ', applied_at IS NOT NULL) FROM "
                      "callback_ledger WHERE delivery_id = 'apr-cb-1'"),
            "approval " + waiting + " APPLIED 1");
  EXPECT_EQ(db.scalar("SELECT cause FROM operation_event WHERE operation_id = '" + waiting +
                      "' AND to_step = " + std::to_string(workflow::code_of(S::APPROVAL_APPROVED))),
            "approval callback apr-cb-1");

  ASSERT_TRUE(deployment && deployment->ok()) << (deployment ? deployment->error.message : "no answer");
  EXPECT_EQ(deployment->value.recorded, record_outcome::inserted);
  EXPECT_EQ(deployment->value.outcome, deploy_outcome::APPLIED);
  EXPECT_TRUE(deployment->value.validated);
  ASSERT_TRUE(deployment->value.row);
  EXPECT_EQ(deployment->value.row->phase, phase::VALIDATED);
  test::expect_same_row(*deployment->value.row, load_operation(*c, merged).value);
  EXPECT_EQ(find_binding(*c, "mona", "", "repo/m.yaml").value.phase, phase::VALIDATED);
  EXPECT_EQ(db.scalar("SELECT CONCAT(mr_iid, ' ', status) FROM deploy_callback WHERE delivery_id = 'dep-1'"),
            "41 success");
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:dep-1'"), "APPLIED");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM callback_operation o JOIN callback_ledger l ON l.id = o.ledger_id "
                      "WHERE l.delivery_id = 'deploy:dep-1' AND o.operation_id = '" +
                      merged + "'"),
            "1");
  EXPECT_EQ(load_operation(*c, a).value.step, S::APPROVAL_SENT);
  EXPECT_EQ(load_operation(*c, b).value.step, S::APPROVAL_SENT);
}

// In a group too, an APPROVED decision given approved_then_create writes CREATE_STARTED in the
// group's commit when the row is the instance's and has no MR; the answer names both writes and the
// row handed back is the stored one. Another instance's row gets the decision only.
TEST_F(GroupUnits, AnApprovalUnitGoesOnToCreateStartedInTheGroupsCommit) {
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto waiting = new_op(*c, "wanda", "repo/w.yaml");
  test::walk(*c, waiting, {S::APPROVAL_SENT});
  auto elsewhere = new_op(*c, "erin", "repo/e.yaml");
  db.exec("UPDATE operation SET owner_instance = 'other-instance' WHERE operation_id = '" + elsewhere + "'");
  const approved_then_create then{"test-instance"};
  int landed = 0;
  approval_answer went_on, decided_only;
  ASSERT_TRUE(committer.submit(test::to_approval_sent(a, 1), count_ok(landed)));
  ASSERT_TRUE(committer.submit_unit(approve("apr-on", waiting, went_on, then)));
  ASSERT_TRUE(committer.submit_unit(approve("apr-elsewhere", elsewhere, decided_only, then)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(landed, 1);
  EXPECT_EQ(committer.stats().units, 2u);

  ASSERT_TRUE(went_on && went_on->ok()) << (went_on ? went_on->error.message : "no answer");
  EXPECT_EQ(went_on->value.new_step, S::CREATE_STARTED);
  EXPECT_EQ(went_on->value.new_version, 4);
  EXPECT_EQ(went_on->value.found_version, 2);
  ASSERT_TRUE(went_on->value.row);
  test::expect_same_row(*went_on->value.row, load_operation(*c, waiting).value);
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(CONCAT(to_step, ' ', actor, ' ', COALESCE(instance_id, '-')) ORDER BY id) "
                      "FROM operation_event WHERE operation_id = '" +
                      waiting + "' AND version > 2"),
            std::to_string(workflow::code_of(S::APPROVAL_APPROVED)) + " callback -," +
                std::to_string(workflow::code_of(S::CREATE_STARTED)) + " workflow test-instance");

  ASSERT_TRUE(decided_only && decided_only->ok()) << (decided_only ? decided_only->error.message : "no answer");
  EXPECT_EQ(decided_only->value.new_step, S::APPROVAL_APPROVED);
  EXPECT_EQ(decided_only->value.found_version, 1);
  EXPECT_EQ(load_operation(*c, elsewhere).value.step, S::APPROVAL_APPROVED);
}

// What a group cannot apply (a copy of a recorded delivery, a deploy copy, a deploy for a change
// not yet MERGED) is undone inside the group, to the unit's savepoint, without touching the
// transitions or the units that settled before it, and answered alone, on the pool, by the full
// rules. The ids put the settling approval before the copies in the group's order.
TEST_F(GroupUnits, ACallbackTheGroupCannotApplyIsUndoneThereAndAnsweredAlone) {
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto b = new_op(*c, "bob", "repo/b.yaml");
  auto first = op_with_id(*c, "10000000-0000-4000-8000-000000000001", "fred", "repo/f.yaml");
  test::walk(*c, first, {S::APPROVAL_SENT});
  auto waiting = op_with_id(*c, "20000000-0000-4000-8000-000000000002", "wanda", "repo/w.yaml");
  test::walk(*c, waiting, {S::APPROVAL_SENT});
  // The delivery was recorded for this operation before, without moving it (as a copy that raced
  // an earlier one would find): the group's flip meets the ledger's key and is undone.
  db.exec(
      "INSERT INTO callback_ledger (delivery_id, kind, operation_id, outcome, received_at) VALUES ('apr-seen', "
      "'approval', '" +
      waiting + "', 'IGNORED_STALE', NOW(3))");
  auto early = op_with_id(*c, "30000000-0000-4000-8000-000000000003", "eve", "repo/e.yaml");
  test::walk(*c, early, test::to_merging, 42);
  // A deploy delivery recorded before for a MERGED change that it did not flip (a copy that came
  // to another instance while the first was applied there): the flip is undone at the key.
  auto merged = op_with_id(*c, "40000000-0000-4000-8000-000000000004", "mona", "repo/m.yaml");
  test::walk(*c, merged, test::to_merged, 44);
  db.exec(
      "INSERT INTO deploy_callback (delivery_id, project, mr_iid, status, received_at) VALUES ('dep-seen', "
      "'config/changes', 44, 'success', NOW(3))");
  db.exec(
      "INSERT INTO callback_ledger (delivery_id, kind, outcome, received_at, applied_at) VALUES "
      "('deploy:dep-seen', 'deploy', 'APPLIED', NOW(3), NOW(3))");
  int landed = 0;
  approval_answer settled, copy;
  deploy_answer overtaking, deploy_copy;
  std::optional<bool> copy_joined, settled_joined;
  ASSERT_TRUE(committer.submit(test::to_approval_sent(a, 1), count_ok(landed)));
  ASSERT_TRUE(committer.submit_unit(watched(approve("apr-first", first, settled), settled_joined)));
  ASSERT_TRUE(committer.submit_unit(watched(approve("apr-seen", waiting, copy), copy_joined)));
  ASSERT_TRUE(committer.submit_unit(deploy("dep-early", 42, early, overtaking)));
  ASSERT_TRUE(committer.submit_unit(deploy("dep-seen", 44, merged, deploy_copy)));
  ASSERT_TRUE(committer.submit(test::to_approval_sent(b, 1), count_ok(landed)));
  const auto waiting_version = load_operation(*c, waiting).value.version;
  const auto early_version = load_operation(*c, early).value.version;
  const auto merged_version = load_operation(*c, merged).value.version;
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 4u) << "the committer's job, then the three it could not settle";
  EXPECT_EQ(landed, 2);
  EXPECT_EQ(committer.stats().groups, 1u) << "the group itself committed";
  EXPECT_EQ(settled_joined, std::optional<bool>(true));
  EXPECT_EQ(copy_joined, std::optional<bool>(true)) << "the copy was in the group and undone there";

  // Settled before the copies' savepoints came and went: still committed.
  ASSERT_TRUE(settled && settled->ok()) << (settled ? settled->error.message : "no answer");
  EXPECT_EQ(settled->value.outcome, callback_outcome::APPLIED);
  EXPECT_EQ(load_operation(*c, first).value.step, S::APPROVAL_APPROVED);
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'apr-first'"), "APPLIED");

  ASSERT_TRUE(copy && copy->ok()) << (copy ? copy->error.message : "no answer");
  EXPECT_EQ(copy->value.outcome, callback_outcome::DUPLICATE);
  EXPECT_EQ(load_operation(*c, waiting).value.version, waiting_version) << "the undone flip left no trace";
  EXPECT_EQ(load_operation(*c, waiting).value.step, S::APPROVAL_SENT);
  EXPECT_EQ(count_events(db, waiting), "2");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM callback_ledger WHERE delivery_id = 'apr-seen'"), "1");

  // The deploy overtook MERGED: recorded alone, OUT_OF_ORDER, the row marked so the MERGED writer
  // checks the recorded reports.
  ASSERT_TRUE(overtaking && overtaking->ok()) << (overtaking ? overtaking->error.message : "no answer");
  EXPECT_EQ(overtaking->value.recorded, record_outcome::inserted);
  EXPECT_EQ(overtaking->value.outcome, deploy_outcome::OUT_OF_ORDER);
  EXPECT_FALSE(overtaking->value.validated);
  EXPECT_EQ(load_operation(*c, early).value.version, early_version);
  EXPECT_EQ(db.scalar("SELECT deploy_reported FROM operation WHERE operation_id = '" + early + "'"), "1");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM deploy_callback WHERE delivery_id = 'dep-early'"), "1");
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:dep-early'"), "OUT_OF_ORDER");

  // The deploy copy: its flip undone, answered as the recorded delivery it is.
  ASSERT_TRUE(deploy_copy && deploy_copy->ok()) << (deploy_copy ? deploy_copy->error.message : "no answer");
  EXPECT_EQ(deploy_copy->value.recorded, record_outcome::duplicate);
  EXPECT_FALSE(deploy_copy->value.validated);
  EXPECT_EQ(load_operation(*c, merged).value.version, merged_version);
  EXPECT_EQ(load_operation(*c, merged).value.phase, phase::MERGED);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM deploy_callback WHERE delivery_id = 'dep-seen'"), "1");

  EXPECT_EQ(load_operation(*c, a).value.version, 2);
  EXPECT_EQ(load_operation(*c, b).value.version, 2);
}

// A group that fails as a whole (a statement error) is rolled back with its units in it, also one
// that already flipped and answered inside it (its id sorts before the failing statement's); each
// unit then applies alone, exactly once.
TEST_F(GroupUnits, AFailedGroupRunsItsCallbacksAloneOnce) {
  auto waiting = op_with_id(*c, "10000000-0000-4000-8000-000000000001", "wanda", "repo/w.yaml");
  test::walk(*c, waiting, {S::APPROVAL_SENT});
  auto a = op_with_id(*c, "f0000000-0000-4000-8000-00000000000f", "alice", "repo/a.yaml");
  auto bad = test::to_approval_sent(a, 1);
  bad.mr_url = std::string(5000, 'u');  // longer than its column: strict mode refuses the statement
  int landed = 0;
  approval_answer approval;
  std::optional<bool> joined;
  ASSERT_TRUE(committer.submit(bad, count_ok(landed)));
  ASSERT_TRUE(committer.submit_unit(watched(approve("apr-after-failure", waiting, approval), joined)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 2u) << "the committer's job, then the unit alone";
  EXPECT_EQ(joined, std::optional<bool>(false));
  EXPECT_EQ(landed, 0);
  ASSERT_TRUE(approval && approval->ok()) << (approval ? approval->error.message : "no answer");
  EXPECT_EQ(approval->value.outcome, callback_outcome::APPLIED);
  EXPECT_EQ(load_operation(*c, waiting).value.step, S::APPROVAL_APPROVED);
  EXPECT_EQ(count_events(db, waiting), "3") << "created, sent, approved: the rolled-back group wrote nothing";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM callback_ledger WHERE delivery_id = 'apr-after-failure'"), "1");
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'apr-after-failure'"), "APPLIED");
  EXPECT_EQ(load_operation(*c, a).value.version, 1);
}

// A callback for an operation that a transition of the same group moves joins the group and is
// applied on top of what that transition wrote, in the same commit: the approval that came while
// its change's APPROVAL_SENT waited for the committer costs no commit of its own.
TEST_F(GroupUnits, ACallbackForAnOperationTheGroupMovesIsAppliedOnTopOfItInTheSameCommit) {
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto b = new_op(*c, "bob", "repo/b.yaml");
  int landed = 0;
  approval_answer approval;
  std::optional<bool> joined;
  ASSERT_TRUE(committer.submit(test::to_approval_sent(a, 1), count_ok(landed)));
  ASSERT_TRUE(committer.submit_unit(watched(approve("apr-same-op", a, approval), joined)));
  ASSERT_TRUE(committer.submit(test::to_approval_sent(b, 1), count_ok(landed)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u) << "the committer's job alone: nothing left to run after it";
  EXPECT_EQ(joined, std::optional<bool>(true));
  EXPECT_EQ(landed, 2);
  EXPECT_EQ(committer.stats().groups, 1u);
  ASSERT_TRUE(approval && approval->ok()) << (approval ? approval->error.message : "no answer");
  EXPECT_EQ(approval->value.outcome, callback_outcome::APPLIED);
  EXPECT_EQ(approval->value.new_version, 3) << "applied on top of the transition to APPROVAL_SENT";
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(to_step ORDER BY id) FROM operation_event WHERE operation_id = '" + a + "'"),
            std::to_string(workflow::code_of(S::APPROVAL_SENDING)) + "," +
                std::to_string(workflow::code_of(S::APPROVAL_SENT)) + "," +
                std::to_string(workflow::code_of(S::APPROVAL_APPROVED)));
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'apr-same-op'"), "APPLIED");
}

// A transition that shares its group with a callback for its own operation is told it landed (the
// list of landed transitions is taken before the units write), and the row it is handed is the row
// as the group left it: the callback's write on top of its own.
TEST_F(GroupUnits, ATransitionThatSharesItsGroupWithACallbackForItsOperationGetsTheRowAsTheGroupLeftIt) {
  auto a = new_op(*c, "alice", "repo/a.yaml");
  approval_answer approval;
  std::optional<bool> joined;
  std::optional<db_result<std::int64_t>> moved;
  std::optional<operation_row> committed;
  auto sent = test::to_approval_sent(a, 1);
  sent.want_row = true;
  ASSERT_TRUE(committer.submit(sent, record(moved, committed)));
  ASSERT_TRUE(committer.submit_unit(watched(approve("apr-with-its-transition", a, approval), joined)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(joined, std::optional<bool>(true));
  ASSERT_TRUE(moved && moved->ok()) << (moved ? moved->error.message : "no answer");
  EXPECT_EQ(moved->value, 2);
  ASSERT_TRUE(committed) << "the row the transition asked for";
  EXPECT_EQ(committed->version, 3);
  EXPECT_EQ(committed->step, S::APPROVAL_APPROVED);
  ASSERT_TRUE(approval && approval->ok()) << (approval ? approval->error.message : "no answer");
  EXPECT_EQ(approval->value.new_version, 3);
}

// A transition that asks for its row and ends up alone in what the committer took (the other
// request was refused before any SQL) commits alone and still gets the row it committed, as when it
// is queued alone: the MERGED write reads from that row whether a deploy report came before it;
// without the row its writer pays a query to ask.
TEST_F(GroupUnits, ATransitionLeftAloneInItsGroupGetsTheRowItAskedFor) {
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto b = new_op(*c, "bob", "repo/b.yaml");
  std::optional<db_result<std::int64_t>> moved, refused;
  std::optional<operation_row> committed;
  auto sent = test::to_approval_sent(a, 1);
  sent.want_row = true;
  auto illegal = test::to_approval_sent(b, 1);
  illegal.from = S::HANDLE_MERGED;  // not in the transition table
  ASSERT_TRUE(committer.submit(sent, record(moved, committed)));
  ASSERT_TRUE(committer.submit(
      illegal, [&](db_context&, const db_result<std::int64_t>& r, const operation_row*) { refused = r; }));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->outcome, db_outcome::illegal_transition);
  ASSERT_TRUE(moved && moved->ok()) << (moved ? moved->error.message : "no answer");
  EXPECT_EQ(moved->value, 2);
  ASSERT_TRUE(committed) << "the row the transition asked for";
  EXPECT_EQ(committed->version, 2);
  EXPECT_EQ(committed->step, S::APPROVAL_SENT);
}

// A pair (a step written with the next one) in a group: its first UPDATE runs with the group's
// other transitions (here sharing a statement with another change's same move), its second after
// them; it is handed the row two versions on. A stale pair misses whole, beside the others.
TEST_F(GroupUnits, APairInAGroupLandsWholeBesideTheOtherTransitions) {
  const auto opened_path =
      std::initializer_list<S>{S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::CREATE_STARTED, S::CREATE_MR_OPENED};
  auto paired = new_op(*c, "pat", "repo/p.yaml");
  auto plain = new_op(*c, "quin", "repo/q.yaml");
  auto stale = new_op(*c, "sam", "repo/s.yaml");
  auto sent = new_op(*c, "ted", "repo/t.yaml");
  auto ahead = new_op(*c, "uma", "repo/u.yaml");
  const auto v = test::walk(*c, paired, opened_path, 1);
  const auto vp = test::walk(*c, plain, opened_path, 2);
  const auto vs = test::walk(*c, stale, opened_path, 3);
  // Already where a pair's second transition expects it (no writer does this today): that second
  // UPDATE would match, but its first misses, so neither may land.
  test::walk(*c, ahead, opened_path, 4);
  const auto va = test::walk(*c, ahead, {S::CREATE_SUCCEEDED});
  std::optional<db_result<std::int64_t>> pair_out, plain_out, stale_out, sent_out, ahead_out;
  std::optional<operation_row> pair_row, plain_row, stale_row, sent_row, ahead_row;
  auto only_passed = *test::passed_and_approved(plain, vp).before;  // the same move, alone in its request
  ASSERT_TRUE(committer.submit(test::passed_and_approved(paired, v), record(pair_out, pair_row)));
  ASSERT_TRUE(committer.submit(only_passed, record(plain_out, plain_row)));
  ASSERT_TRUE(committer.submit(test::passed_and_approved(stale, vs - 1), record(stale_out, stale_row)));
  ASSERT_TRUE(committer.submit(test::to_approval_sent(sent, 1), record(sent_out, sent_row)));
  ASSERT_TRUE(committer.submit(test::passed_and_approved(ahead, va - 1), record(ahead_out, ahead_row)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(committer.stats().groups, 1u);
  EXPECT_EQ(committer.stats().grouped, 5u);
  ASSERT_TRUE(ahead_out);
  EXPECT_EQ(ahead_out->outcome, db_outcome::preempted);
  EXPECT_EQ(load_operation(*c, ahead).value.version, va);
  EXPECT_EQ(load_operation(*c, ahead).value.step, S::CREATE_SUCCEEDED);
  ASSERT_TRUE(pair_out && pair_out->ok()) << (pair_out ? pair_out->error.message : "no answer");
  EXPECT_EQ(pair_out->value, v + 2);
  ASSERT_TRUE(pair_row);
  EXPECT_EQ(pair_row->version, v + 2);
  EXPECT_EQ(pair_row->step, S::HANDLE_APPROVED);
  ASSERT_TRUE(plain_out && plain_out->ok());
  EXPECT_EQ(load_operation(*c, plain).value.step, S::CREATE_SUCCEEDED);
  ASSERT_TRUE(stale_out);
  EXPECT_EQ(stale_out->outcome, db_outcome::preempted);
  EXPECT_FALSE(stale_row);
  EXPECT_EQ(load_operation(*c, stale).value.version, vs);
  EXPECT_EQ(load_operation(*c, stale).value.step, S::CREATE_MR_OPENED);
  ASSERT_TRUE(sent_out && sent_out->ok());
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(to_step ORDER BY version) FROM operation_event WHERE operation_id = '" +
                      paired + "' AND version > " + std::to_string(v)),
            std::to_string(workflow::code_of(S::CREATE_SUCCEEDED)) + "," +
                std::to_string(workflow::code_of(S::HANDLE_APPROVED)));
}

// The MERGED write and the deploy report that overtook it commit together: the report finds MERGED
// under the same transaction and validates the change, and the MERGED writer, handed the VALIDATED
// row, has no deploy check left to make.
TEST_F(GroupUnits, AMergedWriteAndItsDeployReportInOneGroupValidateTheChangeInOneCommit) {
  auto m = new_op(*c, "mona", "repo/m.yaml");
  const auto version = test::walk(*c, m, test::to_merging, 45);
  transition_request merged;
  merged.operation_id = m;
  merged.expected_version = version;
  merged.from = S::HANDLE_MERGING;
  merged.to = S::HANDLE_MERGED;
  merged.cause = "merged";
  merged.mr_iid = 45;
  merged.want_row = true;
  std::optional<db_result<std::int64_t>> moved;
  std::optional<operation_row> committed;
  deploy_answer deployment;
  std::optional<bool> joined;
  ASSERT_TRUE(committer.submit(merged, record(moved, committed)));
  ASSERT_TRUE(committer.submit_unit(watched(deploy("dep-with-merged", 45, m, deployment), joined)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(joined, std::optional<bool>(true));
  ASSERT_TRUE(moved && moved->ok()) << (moved ? moved->error.message : "no answer");
  EXPECT_EQ(moved->value, version + 1);
  ASSERT_TRUE(deployment && deployment->ok()) << (deployment ? deployment->error.message : "no answer");
  EXPECT_TRUE(deployment->value.validated);
  ASSERT_TRUE(committed);
  EXPECT_EQ(committed->phase, workflow::phase::VALIDATED);
  EXPECT_EQ(db.scalar("SELECT GROUP_CONCAT(to_phase ORDER BY id) FROM operation_event WHERE operation_id = '" + m +
                      "' AND id > (SELECT MAX(id) FROM operation_event WHERE operation_id = '" + m +
                      "' AND to_step = " + std::to_string(workflow::code_of(S::HANDLE_MERGING)) + ")"),
            "MERGED,VALIDATED");
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:dep-with-merged'"), "APPLIED");
}

// A transition whose guard misses leaves its operation as it was; the callback for that operation in
// the same group is applied against the row as it is, and the transition is told it was preempted.
TEST_F(GroupUnits, ACallbackBesideAStaleTransitionOfItsOperationIsAppliedToTheRowAsItIs) {
  auto w = new_op(*c, "wanda", "repo/w.yaml");
  test::walk(*c, w, {S::APPROVAL_SENT});  // version 2: a transition that expects 1 is stale
  std::optional<db_result<std::int64_t>> moved;
  approval_answer approval;
  std::optional<bool> joined;
  ASSERT_TRUE(committer.submit(test::to_approval_sent(w, 1), [&](db_context&, const db_result<std::int64_t>& r,
                                                                 const operation_row*) { moved = r; }));
  ASSERT_TRUE(committer.submit_unit(watched(approve("apr-beside-stale", w, approval), joined)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(joined, std::optional<bool>(true));
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->outcome, db_outcome::preempted) << moved->error.message;
  ASSERT_TRUE(approval && approval->ok()) << (approval ? approval->error.message : "no answer");
  EXPECT_EQ(approval->value.outcome, callback_outcome::APPLIED);
  EXPECT_EQ(approval->value.new_version, 3);
  EXPECT_EQ(count_events(db, w), "3") << "created, sent, approved: nothing from the stale transition";
}

// A unit alone in the queue runs alone, as the callback did before it could join a group.
TEST_F(GroupUnits, ACallbackWithNothingElseReadyRunsAlone) {
  auto merged = new_op(*c, "mona", "repo/m.yaml");
  test::walk(*c, merged, test::to_merged, 43);
  deploy_answer deployment;
  ASSERT_TRUE(committer.submit_unit(deploy("dep-alone", 43, merged, deployment)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  ASSERT_TRUE(deployment && deployment->ok()) << (deployment ? deployment->error.message : "no answer");
  EXPECT_TRUE(deployment->value.validated);
  auto st = committer.stats();
  EXPECT_EQ(st.groups, 0u);
  EXPECT_EQ(st.units, 1u);
  EXPECT_EQ(db.scalar("SELECT outcome FROM callback_ledger WHERE delivery_id = 'deploy:dep-alone'"), "APPLIED");
}

namespace {

struct creation_answer {
  std::optional<db_result<create_outcome>> outcome;
  std::optional<operation_row> row;
};

std::shared_ptr<group_unit> create(const new_operation& op, creation_answer& out) {
  return create_operation_unit(
      op, true, [&out](db_context&, const db_result<create_outcome>& r, std::optional<operation_row> row) {
        out.outcome = r;
        out.row = std::move(row);
      });
}

}  // namespace

// A submission that takes a free target shares the group's commit: its operation row, first event
// and binding, with the row it committed handed back, in the group's one compound statement. A
// re-apply over a change that ended takes the target over in the group too, with its history row.
TEST_F(GroupUnits, SubmissionsReadyWithTransitionsCommitInTheirGroup) {
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto ended = new_op(*c, "rita", "repo/r.yaml");
  db.exec("UPDATE binding SET phase = 'VALIDATED' WHERE operation_id = '" + ended + "'");
  auto fresh = test::new_operation_for("nora", "repo/n.yaml");
  auto again = test::new_operation_for("rita", "repo/r.yaml");
  int landed = 0;
  creation_answer first, over;
  ASSERT_TRUE(committer.submit(test::to_approval_sent(a, 1), count_ok(landed)));
  ASSERT_TRUE(committer.submit_unit(create(fresh, first)));
  ASSERT_TRUE(committer.submit_unit(create(again, over)));
  const auto compounds = scripts_sent().compound_texts;
  db_context ctx(db.settings());
  // The CALLs the committer's own connection ran (its session's counter; nothing else uses it).
  const auto calls = [&ctx] {
    return detail::guarded<long long>(
               ctx,
               [](sql::Connection& conn) {
                 std::unique_ptr<sql::Statement> st(conn.createStatement());
                 std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SHOW SESSION STATUS LIKE 'Com_call_procedure'"));
                 return db_result<long long>::success(rs->next() ? std::stoll(rs->getString(2)) : -1);
               })
        .value;
  };
  const auto calls_before = calls();
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(scripts_sent().compound_texts - compounds, 1u) << "the three members in one compound statement";
  EXPECT_EQ(calls() - calls_before, 2) << "each submission is one CALL of the creation procedure (migration 21), "
                                          "not its statements written out into the group's text";
  EXPECT_EQ(landed, 1);
  EXPECT_EQ(committer.stats().units, 2u);

  ASSERT_TRUE(first.outcome && first.outcome->ok()) << (first.outcome ? first.outcome->error.message : "no answer");
  EXPECT_EQ(first.outcome->value, create_outcome::created);
  ASSERT_TRUE(first.row);
  EXPECT_EQ(first.row->operation_id, fresh.operation_id);
  EXPECT_EQ(first.row->version, 1);
  test::expect_same_row(*first.row, load_operation(*c, fresh.operation_id).value);
  EXPECT_EQ(find_binding(*c, "nora", "", "repo/n.yaml").value.operation_id, fresh.operation_id);
  EXPECT_EQ(db.scalar("SELECT cause FROM operation_event WHERE operation_id = '" + fresh.operation_id + "'"),
            "created");

  ASSERT_TRUE(over.outcome && over.outcome->ok()) << (over.outcome ? over.outcome->error.message : "no answer");
  EXPECT_EQ(over.outcome->value, create_outcome::created);
  ASSERT_TRUE(over.row);
  test::expect_same_row(*over.row, load_operation(*c, again.operation_id).value);
  EXPECT_EQ(find_binding(*c, "rita", "", "repo/r.yaml").value.operation_id, again.operation_id);
  EXPECT_EQ(db.scalar("SELECT CONCAT(replaced_operation_id, ' ', replaced_phase) FROM binding_history WHERE "
                      "operation_id = '" +
                      again.operation_id + "'"),
            ended + " VALIDATED");
  EXPECT_EQ(db.scalar("SELECT cause FROM operation_event WHERE operation_id = '" + again.operation_id + "'"),
            "re-applied");
}

// A submission the group cannot carry out (its target held by a change in flight, its id already
// taken) leaves nothing of itself in the group and is answered alone, as it was before.
TEST_F(GroupUnits, ARefusedSubmissionLeavesNothingInTheGroupAndIsAnsweredAlone) {
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto holder = new_op(*c, "hank", "repo/h.yaml");
  auto existing = new_op(*c, "olga", "repo/o.yaml");
  auto blocked = test::new_operation_for("hank", "repo/h.yaml");
  auto taken = test::new_operation_for("tess", "repo/t.yaml");
  taken.operation_id = existing;  // an id that exists (no other member of the group writes it)
  int landed = 0;
  creation_answer refused, duplicate;
  std::optional<bool> refused_joined, duplicate_joined;
  ASSERT_TRUE(committer.submit(test::to_approval_sent(a, 1), count_ok(landed)));
  ASSERT_TRUE(committer.submit_unit(watched(create(blocked, refused), refused_joined)));
  ASSERT_TRUE(committer.submit_unit(watched(create(taken, duplicate), duplicate_joined)));
  ASSERT_TRUE(committer.submit(test::to_approval_sent(holder, 1), count_ok(landed)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 3u) << "the committer's job, then the two it could not settle";
  EXPECT_EQ(refused_joined, std::optional<bool>(true));
  EXPECT_EQ(duplicate_joined, std::optional<bool>(true)) << "the duplicate key was met inside the group";
  EXPECT_EQ(landed, 2);
  EXPECT_EQ(committer.stats().groups, 1u);
  ASSERT_TRUE(refused.outcome && refused.outcome->ok());
  EXPECT_EQ(refused.outcome->value, create_outcome::in_progress);
  EXPECT_FALSE(refused.row);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE operation_id = '" + blocked.operation_id + "'"), "0");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + blocked.operation_id + "'"), "0");
  EXPECT_EQ(find_binding(*c, "hank", "", "repo/h.yaml").value.operation_id, holder);
  ASSERT_TRUE(duplicate.outcome && duplicate.outcome->ok());
  EXPECT_EQ(duplicate.outcome->value, create_outcome::duplicate_operation);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE subject_id = 'tess'"), "0");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + existing + "'"), "1");
  EXPECT_EQ(load_operation(*c, existing).value.subject_id, "olga");
  EXPECT_EQ(load_operation(*c, a).value.version, 2);
}

// Units may fill at most half of the committer's queue: the rest stays for the actors'
// transitions, and a refused unit is destroyed unrun (its caller takes its own path).
TEST_F(GroupUnits, UnitsFillAtMostHalfTheQueue) {
  transition_committer small(pool, 32, 1, 4);
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto b = new_op(*c, "bob", "repo/b.yaml");
  std::vector<approval_answer> answers(3);
  EXPECT_TRUE(small.submit_unit(approve("cap-1", a, answers[0])));
  EXPECT_TRUE(small.submit_unit(approve("cap-2", b, answers[1])));
  EXPECT_FALSE(small.submit_unit(approve("cap-3", a, answers[2]))) << "two units are half of four";
  int landed = 0;
  EXPECT_TRUE(small.submit(test::to_approval_sent(new_op(*c, "carl", "repo/c.yaml"), 1), count_ok(landed)));
  EXPECT_TRUE(small.submit(test::to_approval_sent(new_op(*c, "dora", "repo/d.yaml"), 1), count_ok(landed)));
  db_context ctx(db.settings());
  pool.run_queued(ctx);
  EXPECT_EQ(landed, 2);
  EXPECT_TRUE(answers[0] && answers[0]->ok());
  EXPECT_TRUE(answers[1] && answers[1]->ok());
  EXPECT_FALSE(answers[2]) << "refused: never run";
  // Taken from the queue, the units no longer count against it.
  EXPECT_TRUE(small.submit_unit(approve("cap-4", new_op(*c, "erin", "repo/e.yaml"), answers[2])));
  pool.run_queued(ctx);
  ASSERT_TRUE(answers[2] && answers[2]->ok());
  EXPECT_EQ(answers[2]->value.outcome, callback_outcome::APPLIED);
}

// A group whose COMMIT succeeded but whose answer was lost (the connection dropped right after the
// COMMIT; here the group's own last statement kills it): its receipt, written in its transaction,
// says it committed and what each member did, so every member gets the outcome the answer would
// have given it. Nothing runs again alone, nothing is written twice, and each outcome is counted
// once by the member that learns it (the metrics stay exact).
TEST_F(GroupUnits, AGroupWhoseAnswerIsLostAfterItsCommitGivesEachMemberItsOutcomeFromItsReceipt) {
  int asked = 0;
  transition_committer losing{pool, 32, 1, 100, [&asked] { return ++asked == 1; }};
  const auto [a, b, waiting, merged] = fresh_waiting_and_merged(45);
  auto fresh = test::new_operation_for("nora", "repo/n.yaml");
  auto moved_on = new_op(*c, "milo", "repo/x.yaml");
  std::vector<db_result<std::int64_t>> moved;
  std::vector<bool> with_row;
  auto keep = [&](db_context&, const db_result<std::int64_t>& r, const operation_row* row) {
    moved.push_back(r);
    with_row.push_back(row != nullptr);
  };
  approval_answer approval;
  deploy_answer deployment;
  creation_answer created;
  std::optional<bool> approval_joined, deploy_joined, created_joined;
  auto sent_a = test::to_approval_sent(a, 1);
  sent_a.want_row = true;
  ASSERT_TRUE(losing.submit(sent_a, keep));
  ASSERT_TRUE(losing.submit_unit(watched(approve("apr-kept", waiting, approval), approval_joined)));
  ASSERT_TRUE(losing.submit_unit(watched(deploy("dep-kept", 45, merged, deployment), deploy_joined)));
  ASSERT_TRUE(losing.submit_unit(watched(create(fresh, created), created_joined)));
  ASSERT_TRUE(losing.submit(test::to_approval_sent(b, 1), keep));
  // A member whose guard does not match: its version is not the one it names.
  ASSERT_TRUE(losing.submit(test::to_approval_sent(moved_on, 7), keep));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 1u) << "the committer's job only: no member runs again alone";
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(losing.stats().recovered_groups, 1u);
  EXPECT_EQ(losing.stats().failed_groups, 0u);

  // The group committed, once.
  expect_written_once(a, waiting, merged, fresh.operation_id);
  EXPECT_EQ(count_events(db, moved_on), "1") << "created";

  // Each member learns what it did, as from the answer.
  ASSERT_EQ(moved.size(), 3u);
  std::map<std::int64_t, int> versions;
  int preempted = 0;
  for (const auto& r : moved) {
    if (r.ok()) ++versions[r.value];
    if (!r.ok() && r.outcome == db_outcome::preempted) ++preempted;
  }
  EXPECT_EQ(versions, (std::map<std::int64_t, int>{{2, 2}})) << "both transitions landed at version 2";
  EXPECT_EQ(preempted, 1) << "the one whose guard did not match";
  EXPECT_TRUE(with_row.front()) << "the row asked for, read after the group at the version it wrote";
  EXPECT_EQ(approval_joined, std::optional<bool>(true));
  ASSERT_TRUE(approval && approval->ok()) << (approval ? approval->error.message : "no answer");
  EXPECT_EQ(approval->value.outcome, callback_outcome::APPLIED);
  EXPECT_EQ(deploy_joined, std::optional<bool>(true));
  ASSERT_TRUE(deployment && deployment->ok()) << (deployment ? deployment->error.message : "no answer");
  EXPECT_TRUE(deployment->value.validated) << "this delivery's flip: counted by its caller, once";
  EXPECT_EQ(created_joined, std::optional<bool>(true));
  ASSERT_TRUE(created.outcome && created.outcome->ok())
      << (created.outcome ? created.outcome->error.message : "no answer");
  EXPECT_EQ(created.outcome->value, create_outcome::created);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM group_receipt"), "1") << "one row per committer slot";

  // The next group commits as usual and overwrites the slot's receipt.
  int landed = 0;
  ASSERT_TRUE(losing.submit(test::to_approval_sent(new_op(*c, "lena", "repo/l.yaml"), 1), count_ok(landed)));
  ASSERT_TRUE(losing.submit(test::to_approval_sent(new_op(*c, "otto", "repo/o.yaml"), 1), count_ok(landed)));
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(landed, 2);
  EXPECT_EQ(losing.stats().groups, 2u);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM group_receipt"), "1");
}

// A group whose COMMIT succeeded but whose answer was lost (the connection dropped right after the
// COMMIT; here the group's own last statement kills it) and whose receipt cannot tell (here: a
// committer that writes none) is taken for failed, and its members run again alone. Each finds what the group committed and nothing is written twice: the transitions are
// told their rows moved on (the actor then reads its row and finds its own step), the callbacks are
// answered as copies of deliveries already applied, the submission as a change that exists.
TEST_F(GroupUnits, AGroupWhoseAnswerIsLostWithoutAReceiptIsWrittenOnceAndItsMembersFindItDone) {
  int asked = 0;
  transition_committer losing{pool, 32, 1, 100, [&asked] { return ++asked == 1; }, false};
  const auto [a, b, waiting, merged] = fresh_waiting_and_merged(44);
  auto fresh = test::new_operation_for("nora", "repo/n.yaml");
  std::vector<db_result<std::int64_t>> moved;
  auto keep = [&moved](db_context&, const db_result<std::int64_t>& r, const operation_row*) { moved.push_back(r); };
  approval_answer approval;
  deploy_answer deployment;
  creation_answer created;
  std::optional<bool> approval_joined, deploy_joined, created_joined;
  ASSERT_TRUE(losing.submit(test::to_approval_sent(a, 1), keep));
  ASSERT_TRUE(losing.submit_unit(watched(approve("apr-lost", waiting, approval), approval_joined)));
  ASSERT_TRUE(losing.submit_unit(watched(deploy("dep-lost", 44, merged, deployment), deploy_joined)));
  ASSERT_TRUE(losing.submit_unit(watched(create(fresh, created), created_joined)));
  ASSERT_TRUE(losing.submit(test::to_approval_sent(b, 1), keep));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 4u) << "the committer's job, then each unit alone";
  EXPECT_EQ(asked, 1) << "asked once, for the one group";
  EXPECT_EQ(losing.stats().failed_groups, 1u);

  // The group committed, once.
  EXPECT_EQ(load_operation(*c, a).value.step, S::APPROVAL_SENT);
  EXPECT_EQ(load_operation(*c, b).value.step, S::APPROVAL_SENT);
  EXPECT_EQ(load_operation(*c, waiting).value.step, S::APPROVAL_APPROVED);
  EXPECT_EQ(load_operation(*c, merged).value.phase, phase::VALIDATED);
  EXPECT_EQ(load_operation(*c, fresh.operation_id).value.version, 1);
  expect_written_once(a, waiting, merged, fresh.operation_id);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM callback_ledger WHERE delivery_id IN ('apr-lost', 'deploy:dep-lost')"),
            "2");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM deploy_callback WHERE delivery_id = 'dep-lost'"), "1");
  EXPECT_EQ(find_binding(*c, "nora", "", "repo/n.yaml").value.operation_id, fresh.operation_id);

  // Its members, run again alone, find it done.
  ASSERT_EQ(moved.size(), 2u);
  for (const auto& r : moved) {
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.outcome, db_outcome::preempted) << r.error.message;
  }
  EXPECT_EQ(approval_joined, std::optional<bool>(false));
  ASSERT_TRUE(approval && approval->ok()) << (approval ? approval->error.message : "no answer");
  EXPECT_EQ(approval->value.outcome, callback_outcome::DUPLICATE);
  EXPECT_EQ(deploy_joined, std::optional<bool>(false));
  ASSERT_TRUE(deployment && deployment->ok()) << (deployment ? deployment->error.message : "no answer");
  EXPECT_EQ(deployment->value.recorded, record_outcome::duplicate) << "a copy of a delivery recorded as applied";
  EXPECT_FALSE(deployment->value.validated) << "the flip is the group's, not counted again";
  EXPECT_EQ(created_joined, std::optional<bool>(false));
  ASSERT_TRUE(created.outcome && created.outcome->ok())
      << (created.outcome ? created.outcome->error.message : "no answer");
  EXPECT_EQ(created.outcome->value, create_outcome::duplicate_operation);

  // The session opened a new connection for the members alone, and the next group commits as usual.
  int landed = 0;
  auto later = new_op(*c, "lena", "repo/l.yaml");
  auto other = new_op(*c, "otto", "repo/o.yaml");
  ASSERT_TRUE(losing.submit(test::to_approval_sent(later, 1), count_ok(landed)));
  ASSERT_TRUE(losing.submit(test::to_approval_sent(other, 1), count_ok(landed)));
  EXPECT_EQ(pool.run_queued(ctx), 1u);
  EXPECT_EQ(landed, 2);
  EXPECT_EQ(losing.stats().groups, 2u);
  EXPECT_EQ(losing.stats().failed_groups, 1u);
}

// -- submissions under an idempotency key (keyed_creation)

namespace {

struct keyed_answer {
  creation_answer created;
  int alone = 0;  // times the submission's keyed path ran alone
};

std::shared_ptr<group_unit> create_keyed(const new_operation& op, const std::string& key, keyed_answer& out) {
  auto keyed = std::make_shared<keyed_creation>();
  keyed->record_insert = [key](sql::Connection& conn) {
    return idem_completed_insert_sql(conn, key, std::string(64, 'f'), 3600, {"", std::chrono::seconds(30)}, 202,
                                     "answer for " + key);
  };
  keyed->alone = [&out](db_context&) { ++out.alone; };
  return create_operation_unit(
      op, true,
      [&out](db_context&, const db_result<create_outcome>& r, std::optional<operation_row> row) {
        out.created.outcome = r;
        out.created.row = std::move(row);
      },
      keyed);
}

std::string record_of(const test_database& db, const std::string& key) {
  return db.scalar(
      "SELECT CONCAT(state, ' ', status_code, ' ', response_body) FROM idempotency_record WHERE idem_key = '" + key +
      "'");
}

}  // namespace

// A keyed submission with a fresh key and a free target commits its key's record, COMPLETED with
// its answer, in the group's commit with its creation. A key that already has a record, or a
// target that is held, leaves nothing of the unit in the group (neither record nor change) and the
// submission's whole keyed path runs alone instead: its gate replays, refuses or runs it.
TEST_F(GroupUnits, AKeyedSubmissionCommitsItsRecordWithItsCreationAndAnythingElseRunsAlone) {
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto holder = new_op(*c, "hank", "repo/h.yaml");
  db.exec(
      "INSERT INTO idempotency_record (idem_key, fingerprint, state, expires_at) VALUES "
      "('submit:u:used', REPEAT('e', 64), 'IN_FLIGHT', NOW(3) + INTERVAL 1 HOUR)");
  auto fresh = test::new_operation_for("nora", "repo/n.yaml");
  auto replayed = test::new_operation_for("ursula", "repo/u.yaml");
  auto blocked = test::new_operation_for("hank", "repo/h.yaml");
  keyed_answer first, used, held;
  int landed = 0;
  ASSERT_TRUE(committer.submit(test::to_approval_sent(a, 1), count_ok(landed)));
  ASSERT_TRUE(committer.submit_unit(create_keyed(fresh, "submit:u:fresh", first)));
  ASSERT_TRUE(committer.submit_unit(create_keyed(replayed, "submit:u:used", used)));
  ASSERT_TRUE(committer.submit_unit(create_keyed(blocked, "submit:u:held", held)));
  const auto compounds = scripts_sent().compound_texts;
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 3u) << "the committer's job, then the two it could not settle";
  EXPECT_EQ(scripts_sent().compound_texts - compounds, 1u) << "the group's one compound statement";
  EXPECT_EQ(landed, 1);
  EXPECT_EQ(committer.stats().groups, 1u);

  ASSERT_TRUE(first.created.outcome && first.created.outcome->ok());
  EXPECT_EQ(first.created.outcome->value, create_outcome::created);
  ASSERT_TRUE(first.created.row);
  EXPECT_EQ(first.created.row->operation_id, fresh.operation_id);
  EXPECT_EQ(first.alone, 0);
  EXPECT_EQ(record_of(db, "submit:u:fresh"), "COMPLETED 202 answer for submit:u:fresh");
  EXPECT_EQ(count_events(db, fresh.operation_id), "1");

  EXPECT_EQ(used.alone, 1);
  EXPECT_FALSE(used.created.outcome) << "answered by its keyed path, not here";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE operation_id = '" + replayed.operation_id + "'"), "0");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE subject_id = 'ursula'"), "0");
  EXPECT_EQ(db.scalar("SELECT CONCAT(state, ' ', fingerprint) FROM idempotency_record WHERE idem_key = "
                      "'submit:u:used'"),
            "IN_FLIGHT " + std::string(64, 'e'))
      << "the record under the key is left as it was";

  EXPECT_EQ(held.alone, 1);
  EXPECT_FALSE(held.created.outcome);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM idempotency_record WHERE idem_key = 'submit:u:held'"), "0")
      << "the claim is undone with the creation";
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE operation_id = '" + blocked.operation_id + "'"), "0");
  EXPECT_EQ(find_binding(*c, "hank", "", "repo/h.yaml").value.operation_id, holder);
}

// A keyed submission in a group whose answer is lost after its COMMIT, with no receipt to tell (a
// committer that writes none): the record and the change are committed once, together, and the
// submission's keyed path runs alone, where its gate finds the record COMPLETED and replays the
// answer. With a receipt, the submission is answered as created, as from the answer.
TEST_F(GroupUnits, AKeyedSubmissionWhoseGroupLosesItsAnswerFindsItsRecordAndItsChangeCommittedOnce) {
  int asked = 0;
  transition_committer losing{pool, 32, 1, 100, [&asked] { return ++asked == 1; }, false};
  auto a = new_op(*c, "alice", "repo/a.yaml");
  auto fresh = test::new_operation_for("nora", "repo/n.yaml");
  keyed_answer keyed;
  int landed = 0;
  ASSERT_TRUE(losing.submit(test::to_approval_sent(a, 1), count_ok(landed)));
  ASSERT_TRUE(losing.submit_unit(create_keyed(fresh, "submit:u:lost", keyed)));
  db_context ctx(db.settings());
  EXPECT_EQ(pool.run_queued(ctx), 2u) << "the committer's job, then the unit alone";
  EXPECT_EQ(losing.stats().failed_groups, 1u);
  EXPECT_EQ(keyed.alone, 1);
  EXPECT_FALSE(keyed.created.outcome);
  EXPECT_EQ(record_of(db, "submit:u:lost"), "COMPLETED 202 answer for submit:u:lost");
  EXPECT_EQ(count_events(db, fresh.operation_id), "1") << "created once";
  EXPECT_EQ(find_binding(*c, "nora", "", "repo/n.yaml").value.operation_id, fresh.operation_id);
  EXPECT_EQ(load_operation(*c, a).value.step, S::APPROVAL_SENT);
  EXPECT_EQ(landed, 0) << "its transition was told its row moved on";
}
