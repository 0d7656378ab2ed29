// The coordinator's pure decisions, and its repository steps on a real MariaDB.
#include "actors/batch_coordinator.hpp"
#include "persistence/batch_repo.hpp"
#include "persistence/repo_test_support.hpp"
#include "tests/support/test_db.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using namespace changeflow::actors;
using persistence::test::new_op;
using persistence::test::walk;
using S = workflow::step;

namespace {
/// A round plan that sends `id` back to the waiting set and carries every other member.
persistence::round_planner defer_only(const std::string& id) {
  return [id](const std::vector<persistence::operation_row>& rows) {
    persistence::round_plan p;
    for (const auto& r : rows) (r.operation_id == id ? p.deferred : p.included).push_back(r.operation_id);
    return p;
  };
}
effects::batch_member_change member(const std::string& id, std::int64_t created, const std::string& path) {
  return {id, "alice", "title " + id, R"({"files":[{"path":")" + path + R"(","content":"x"}]})", created};
}
}  // namespace

TEST(BatchPlan, LaterMemberTouchingTheSameFileIsDeferred) {
  // Claim order b, a; created_at order a (1), b (2), c (3): b is later than a and shares its file.
  auto plan = effects::plan_batch({member("b", 2, "x.yaml"), member("a", 1, "x.yaml"), member("c", 3, "y.yaml")});
  ASSERT_EQ(plan.included.size(), 2u);
  EXPECT_EQ(plan.included[0].operation_id, "a");
  EXPECT_EQ(plan.included[1].operation_id, "c");
  ASSERT_EQ(plan.deferred.size(), 1u);
  EXPECT_EQ(plan.deferred[0], "b");
  ASSERT_EQ(plan.actions.size(), 2u);  // one commit, one action per included file
}

TEST(BatchPlan, TitleAndDescriptionNameEveryMember) {
  std::vector<effects::batch_member_change> ms = {member("op-1", 1, "a"), member("op-2", 2, "b")};
  auto title = effects::batch_title(9, ms);
  EXPECT_NE(title.find("title op-1"), std::string::npos);
  EXPECT_NE(title.find("title op-2"), std::string::npos);
  auto d = effects::batch_description(9, ms);
  EXPECT_NE(d.find("changeflow-operation: op-1"), std::string::npos);
  EXPECT_NE(d.find("changeflow-operation: op-2"), std::string::npos);
  EXPECT_LE(effects::batch_title(1, std::vector<effects::batch_member_change>(100, member("long-id", 1, "p"))).size(),
            255u);
}

TEST(BatchVerdict, OnlyAPipelineOnTheCurrentShaDecides) {
  effects::batch_mr_view mr;
  mr.state = "opened";
  mr.sha = "new";
  mr.pipeline_sha = "old";
  mr.pipeline_status = "failed";
  EXPECT_EQ(classify(mr), effects::batch_verdict::running);
  mr.pipeline_sha = "new";
  EXPECT_EQ(classify(mr), effects::batch_verdict::pipeline_failed);
  mr.pipeline_status = "success";
  EXPECT_EQ(classify(mr), effects::batch_verdict::ready);
  mr.state = "merged";
  EXPECT_EQ(classify(mr), effects::batch_verdict::merged);
}

// -- repository steps of the coordinator, real MariaDB

TEST(BatchRepo, EnteringBatchWaitingAdmitsAndADuplicateAdmissionIsANoOp) {
  changeflow::testing::test_database db;
  auto c = db.connect();
  auto id = new_op(*c, "alice", "t1");
  walk(*c, id, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::BATCH_WAITING});
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = '" + id + "'"), "1");
  EXPECT_FALSE(persistence::test::admit_bare(*c, id));  // already admitted: the unique key holds
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request"), "1");
}

TEST(BatchRepo, ClaimMarkSucceedMovesMembersAndReleasesTheSlot) {
  changeflow::testing::test_database db;
  auto c = db.connect();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(new_op(*c, "u" + std::to_string(i), "t" + std::to_string(i)));
    walk(*c, ids.back(), {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::BATCH_WAITING});
  }
  db.exec("UPDATE merge_batch_request SET created_at = NOW(3) - INTERVAL 1 SECOND");
  auto claim = persistence::claim_round(*c, {}, 50, {}, {}, "test");
  ASSERT_TRUE(claim.ok()) << claim.error.message;
  ASSERT_EQ(claim.value.kind, persistence::claim_kind::claimed);
  const auto batch = claim.value.batch_id;
  EXPECT_EQ(claim.value.carried.size(), 3u);  // every member moved to BATCH_CLAIMED in the claim
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE step = 10602 AND batch_id = " + std::to_string(batch)),
            "3");
  ASSERT_TRUE(persistence::record_batch_mr(*c, batch, 42, "changeflow/batch-x", "http://mr/42").ok());
  auto ok = persistence::settle_succeeded(*c, batch, persistence::batch_status::RUNNING, 42, "merged", "test");
  ASSERT_TRUE(ok.ok()) << ok.error.message;
  EXPECT_EQ(ok.value, 3);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE step = 10604 AND phase = 'MERGED' AND mr_iid = 42"), "3");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM binding WHERE phase = 'MERGED'"), "3");
  // Each move (claimed, merged) is one event per member, written by the transition trigger from the
  // move's own UPDATE (which moved the binding too), leaving nothing in the staging columns.
  for (const auto& id : ids) {
    EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE actor = 'batch' AND operation_id = '" + id + "'"),
              "2")
        << id;
  }
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE event_actor IS NOT NULL OR event_cause IS NOT NULL"), "0");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch WHERE active_slot = 1"), "0");
  // A second settler (sweep racing the coordinator) is preempted and writes nothing.
  auto late = persistence::settle_failed_batch(*c, batch, persistence::batch_status::RUNNING,
                                               persistence::member_reset::requeue, "late");
  EXPECT_EQ(late.outcome, persistence::db_outcome::preempted);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE step = 10604"), "3");
  // The deploy callback path validates a batch member.
  auto v = persistence::mark_validated(*c, ids[0], "callback");
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v.value.has_value());
}

TEST(BatchRepo, BisectionRequeuesHalvesAndTheLoneFailureEndsBatchFailed) {
  changeflow::testing::test_database db;
  auto c = db.connect();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(new_op(*c, "u" + std::to_string(i), "t" + std::to_string(i)));
    walk(*c, ids.back(), {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::BATCH_WAITING});
  }
  db.exec("UPDATE merge_batch_request SET created_at = NOW(3) - INTERVAL 1 SECOND");
  auto first = persistence::claim_round(*c, {}, 50, {}, {}, "t");
  ASSERT_EQ(first.value.kind, persistence::claim_kind::claimed);
  ASSERT_EQ(first.value.carried.size(), 4u);
  auto split =
      persistence::requeue_members(*c, first.value.batch_id, {{ids[0], ids[1]}, {ids[2], ids[3]}}, "bisect: x");
  ASSERT_TRUE(split.ok()) << split.error.message;
  EXPECT_EQ(split.value, 4);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE step = 10601 AND batch_id IS NULL"), "4");
  // The older half is claimed alone, one level deeper.
  auto half = persistence::claim_round(*c, {}, 50, {}, {}, "t");
  ASSERT_TRUE(half.ok()) << half.error.message;
  ASSERT_EQ(half.value.kind, persistence::claim_kind::claimed);
  EXPECT_EQ(half.value.members.size(), 2u);
  EXPECT_EQ(half.value.depth, 1);
  EXPECT_EQ(db.scalar("SELECT split_depth FROM merge_batch WHERE id = " + std::to_string(half.value.batch_id)), "1");
  EXPECT_EQ(half.value.carried.size(), 2u);
  // Fails alone (no group): members BATCH_FAILED, waiting rows removed, slot released.
  auto alone = persistence::requeue_members(*c, half.value.batch_id, {}, "failed alone: x");
  ASSERT_TRUE(alone.ok()) << alone.error.message;
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE step = 10603 AND phase = 'HANDLE_FAILED'"), "2");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request"), "2");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch WHERE active_slot = 1"), "0");
}

TEST(BatchRepo, DeferredMemberGoesBackToWaitingAndLeadsTheNextRound) {
  changeflow::testing::test_database db;
  auto c = db.connect();
  auto a = new_op(*c, "a", "ta");
  walk(*c, a, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::BATCH_WAITING});
  auto b = new_op(*c, "b", "tb");
  walk(*c, b, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::BATCH_WAITING});
  db.exec("UPDATE merge_batch_request SET created_at = NOW(3) - INTERVAL 1 SECOND");
  auto cl = persistence::claim_round(*c, {}, 50, {}, defer_only(b), "t");
  ASSERT_TRUE(cl.ok()) << cl.error.message;
  ASSERT_EQ(cl.value.kind, persistence::claim_kind::claimed);
  EXPECT_EQ(cl.value.deferred, 1u);
  ASSERT_EQ(cl.value.carried.size(), 1u);
  EXPECT_EQ(cl.value.carried[0].operation_id, a);
  EXPECT_EQ(persistence::load_operation(*c, a).value.step, S::BATCH_CLAIMED);
  EXPECT_EQ(persistence::load_operation(*c, b).value.step, S::BATCH_WAITING);
  auto w = persistence::list_waiting(*c, 10);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w.value.size(), 1u);
  EXPECT_EQ(w.value[0].operation_id, b);
}

namespace {
std::string waiting_op(persistence::session c, const std::string& target) {
  auto id = new_op(c, "u-" + target, target);
  walk(c, id, {S::APPROVAL_SENT, S::APPROVAL_APPROVED, S::BATCH_WAITING});
  return id;
}
void operator_move(persistence::session c, const std::string& id, S to, const std::string& cause) {
  auto row = persistence::load_operation(c, id).value;
  persistence::transition_request t;
  t.operation_id = id;
  t.expected_version = row.version;
  t.from = row.step;
  t.to = to;
  t.by = workflow::actor_kind::operator_only;
  t.cause = cause;
  auto r = persistence::transition(c, t);
  EXPECT_TRUE(r.ok()) << r.error.message;
}
int batch_attempts(changeflow::testing::test_database& db, const std::string& id) {
  return std::stoi(db.scalar("SELECT batch_attempts FROM operation WHERE operation_id = '" + id + "'"));
}
}  // namespace

TEST(BatchRepo, MemberClosedWhileWaitingIsNeverClaimedNorCounted) {
  changeflow::testing::test_database db;
  auto c = db.connect();
  auto stays = waiting_op(*c, "stays");
  auto closed = waiting_op(*c, "closed");
  // An operator closes it while it waits: the close knows nothing of the waiting set.
  operator_move(*c, closed, S::CLOSE_SUCCEEDED, "closed by an operator");
  db.exec("UPDATE merge_batch_request SET created_at = NOW(3) - INTERVAL 1 SECOND");

  auto cl = persistence::claim_round(*c, {}, 50, {}, {}, "t");
  ASSERT_TRUE(cl.ok()) << cl.error.message;
  ASSERT_EQ(cl.value.kind, persistence::claim_kind::claimed);
  ASSERT_EQ(cl.value.members.size(), 1u);
  EXPECT_EQ(cl.value.members[0].operation_id, stays);
  EXPECT_EQ(batch_attempts(db, stays), 1);
  EXPECT_EQ(batch_attempts(db, closed), 0);
  // It left the waiting set: no row, so no later round or requeue brings it back.
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = '" + closed + "'"), "0");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_history WHERE operation_id = '" + closed + "'"), "0");
  EXPECT_EQ(persistence::load_operation(*c, closed).value.step, S::CLOSE_SUCCEEDED);
}

TEST(BatchRepo, ClaimsCountAttemptsAndMembersOutOfAttemptsLeaveAsBatchFailed) {
  changeflow::testing::test_database db;
  auto c = db.connect();
  auto old_member = waiting_op(*c, "old");
  auto young = waiting_op(*c, "young");
  auto deferred = waiting_op(*c, "deferred");
  auto claim_all = [&](bool defer) {
    db.exec(
        "UPDATE merge_batch_request SET created_at = NOW(3) - INTERVAL 1 SECOND WHERE batch_id IS "
        "NULL");
    auto cl =
        persistence::claim_round(*c, {}, 50, {}, defer ? defer_only(deferred) : persistence::round_planner{}, "t");
    EXPECT_TRUE(cl.ok()) << cl.error.message;
    EXPECT_EQ(cl.value.kind, persistence::claim_kind::claimed);
    if (defer) {
      EXPECT_EQ(cl.value.deferred, 1u);
    }
    return cl.value.batch_id;
  };
  // Two failed batches requeue everyone; the deferred member was never carried by an MR.
  for (int i = 0; i < 2; ++i) {
    auto b = claim_all(true);
    ASSERT_TRUE(persistence::settle_failed_batch(*c, b, persistence::batch_status::RUNNING,
                                                 persistence::member_reset::requeue, "MR closed")
                    .ok());
  }
  EXPECT_EQ(batch_attempts(db, old_member), 2);
  EXPECT_EQ(batch_attempts(db, deferred), 0);
  // The third failure: the old member is out of attempts, the young one waits again.
  auto b = claim_all(true);
  auto settled =
      persistence::settle_failed_batch(*c, b, persistence::batch_status::RUNNING, persistence::member_reset::requeue,
                                       "MR closed: x", {old_member}, "MR closed: x (no batch attempts left)");
  ASSERT_TRUE(settled.ok()) << settled.error.message;
  auto gone = persistence::load_operation(*c, old_member).value;
  EXPECT_EQ(gone.step, S::BATCH_FAILED);
  EXPECT_EQ(gone.phase, workflow::phase::HANDLE_FAILED);
  EXPECT_EQ(gone.batch_attempts, 3);
  ASSERT_TRUE(gone.last_error.has_value());
  EXPECT_NE(gone.last_error->find("MR closed: x (no batch attempts left)"), std::string::npos) << *gone.last_error;
  EXPECT_EQ(
      db.scalar("SELECT cause FROM operation_event WHERE operation_id = '" + old_member + "' AND to_step = 10603"),
      "batch " + std::to_string(b) + " failed: MR closed: x (no batch attempts left)");
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = '" + old_member + "'"), "0");
  EXPECT_EQ(persistence::load_operation(*c, young).value.step, S::BATCH_WAITING);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"), "2");
  // An operator sends it back: a fresh budget, the timeline keeps the earlier attempts.
  operator_move(*c, old_member, S::BATCH_WAITING, "retried by an operator");
  EXPECT_EQ(batch_attempts(db, old_member), 0);
  EXPECT_EQ(
      db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + old_member + "' AND to_step = 10602"),
      "3");
}
