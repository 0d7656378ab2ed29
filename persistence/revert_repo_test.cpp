#include "persistence/revert_repo.hpp"

#include "persistence/binding_repo.hpp"
#include "persistence/repo_test_support.hpp"
#include "tests/support/test_db.hpp"

#include <cppconn/resultset.h>
#include <cppconn/statement.h>
#include <gtest/gtest.h>

#include <barrier>
#include <thread>

using namespace changeflow;
using namespace changeflow::persistence;
using changeflow::testing::test_database;
using test::new_op;
using test::walk;
using workflow::revert_verdict;
using S = workflow::step;

namespace {

/// A change walked to VALIDATED the way a deploy confirmation gets it there.
std::string validated_op(session c, const std::string& target, const std::string& repository = {}) {
  auto id = new_op(c, "erin", target, "erin", repository);
  walk(c, id, test::to_merged, 7);
  auto flipped = mark_validated(c, id, "callback");
  EXPECT_TRUE(flipped.ok() && flipped.value) << flipped.error.message;
  return id;
}

new_operation revert_of(const std::string& original, const std::string& target) {
  new_operation op;
  op.operation_id = ids::new_uuid();
  op.subject_id = "erin";
  op.target_key = target;
  op.title = "Revert: change " + target;
  op.payload_json = R"({"files":[{"path":"a.yaml","content":"old","action":"update"}]})";
  op.owner_instance = "test-instance";
  op.requester = "erin";
  op.actor = "user:erin";
  op.revert_of = original;
  return op;
}

}  // namespace

// Racers revert one validated change at the same moment, each on its own connection, lined up
// behind a lock on the original's row so they provably overlap: exactly one revert is created and
// linked, every other racer is told which one, and nothing of theirs was written.
TEST(RevertRepo, ConcurrentRevertsOfOneChangeCreateOne) {
  test_database db;
  auto setup = db.connect();
  const std::string target = "repo/reverted.yaml";
  auto original = validated_op(*setup, target);
  const auto version_before = load_operation(*setup, original).value.version;

  constexpr int racers = 6;
  test::racer_connections racing(db, racers);
  auto gate = db.connect();
  gate->setAutoCommit(false);
  {
    std::unique_ptr<sql::Statement> st(gate->createStatement());
    std::unique_ptr<sql::ResultSet>(
        st->executeQuery("SELECT version FROM operation WHERE operation_id = '" + original + "' FOR UPDATE"));
  }
  std::barrier sync(racers);
  std::vector<db_result<revert_created>> results(racers);
  std::vector<std::string> ids(racers);
  std::vector<std::thread> threads;
  for (int i = 0; i < racers; ++i) {
    threads.emplace_back([&, i] {
      auto op = revert_of(original, target);
      ids[i] = op.operation_id;
      sync.arrive_and_wait();
      results[i] = create_revert(*racing.conns[i], op, op.actor);
    });
  }
  bool all_waited = racing.all_waiting_in(db, "SELECT step, phase, reverted_by FROM operation");
  gate->rollback();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(all_waited) << "the racers never all waited on the original's row: they did not overlap";

  std::string winner;
  int created = 0;
  for (int i = 0; i < racers; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].error.message;
    if (results[i].value.verdict == revert_verdict::allowed) {
      EXPECT_EQ(results[i].value.created, create_outcome::created);
      ++created;
      winner = ids[i];
    }
  }
  ASSERT_EQ(created, 1);
  for (int i = 0; i < racers; ++i) {
    if (ids[i] == winner) continue;
    EXPECT_EQ(results[i].value.verdict, revert_verdict::already_reverted);
    EXPECT_EQ(results[i].value.current_revert, winner);
  }
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE revert_of = '" + original + "'"), "1");
  auto orig = load_operation(*setup, original);
  ASSERT_TRUE(orig.ok());
  EXPECT_EQ(orig.value.reverted_by, winner);
  EXPECT_EQ(orig.value.step, S::CALLED_BACK) << "the original stays validated";
  EXPECT_EQ(orig.value.version, version_before + 1);
  auto events = list_events(*setup, original);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events.value.back().cause, "reverted by " + winner);
  EXPECT_EQ(events.value.back().actor, "user:erin");
  EXPECT_EQ(events.value.back().from_step, S::CALLED_BACK);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation_event WHERE operation_id = '" + original +
                      "' AND cause LIKE 'reverted by %'"),
            "1");
  auto revert = load_operation(*setup, winner);
  ASSERT_TRUE(revert.ok());
  EXPECT_EQ(revert.value.revert_of, original);
  EXPECT_FALSE(revert.value.reverted_by);
  auto revert_events = list_events(*setup, winner);
  ASSERT_TRUE(revert_events.ok());
  EXPECT_EQ(revert_events.value.front().cause, "re-applied; revert of " + original);
  // The binding moved to the revert: it is the target's current change now.
  EXPECT_EQ(db.scalar("SELECT operation_id FROM binding WHERE subject_id = 'erin' AND target_key = '" + target + "'"),
            winner);
}

// A change that is not VALIDATED is refused before anything is written; a revert that ended without
// taking effect lets the change be reverted again (the link moves to the newer revert); a revert
// that is the current one answers duplicate (a retry that already created it).
TEST(RevertRepo, RefusalsRetriesAndASecondRevertAfterOneWithoutEffect) {
  test_database db;
  auto c = db.connect();
  auto pending = new_op(*c, "erin", "repo/pending.yaml", "erin");
  auto refused = create_revert(*c, revert_of(pending, "repo/pending.yaml"), "user:erin");
  ASSERT_TRUE(refused.ok()) << refused.error.message;
  EXPECT_EQ(refused.value.verdict, revert_verdict::not_validated);
  EXPECT_EQ(refused.value.original_step, S::APPROVAL_SENDING);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation"), "1");
  EXPECT_EQ(create_revert(*c, revert_of(ids::new_uuid(), "repo/none.yaml"), "user:erin").outcome,
            db_outcome::not_found);

  const std::string target = "repo/twice.yaml";
  auto original = validated_op(*c, target);
  auto first = revert_of(original, target);
  auto r1 = create_revert(*c, first, "user:erin");
  ASSERT_TRUE(r1.ok()) << r1.error.message;
  ASSERT_EQ(r1.value.created, create_outcome::created);
  auto retry = create_revert(*c, first, "user:erin");
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry.value.created, create_outcome::duplicate_operation);

  // In flight: refused. Cancelled (never merged): the change may be reverted again.
  auto second = revert_of(original, target);
  auto blocked = create_revert(*c, second, "user:erin");
  ASSERT_TRUE(blocked.ok());
  EXPECT_EQ(blocked.value.verdict, revert_verdict::already_reverted);
  EXPECT_EQ(blocked.value.current_revert, first.operation_id);
  walk(*c, first.operation_id, {S::CANCELLED}, std::nullopt, workflow::actor_kind::requester);
  auto link = find_revert(*c, load_operation(*c, original).value);
  ASSERT_TRUE(link.ok() && link.value);
  EXPECT_EQ(link.value->state(), workflow::earlier_revert::without_effect);
  auto r2 = create_revert(*c, second, "user:erin");
  ASSERT_TRUE(r2.ok()) << r2.error.message;
  EXPECT_EQ(r2.value.verdict, revert_verdict::allowed);
  EXPECT_EQ(r2.value.created, create_outcome::created);
  EXPECT_EQ(load_operation(*c, original).value.reverted_by, second.operation_id);
  EXPECT_EQ(load_operation(*c, first.operation_id).value.revert_of, original);

  // The second revert merges and is validated: it took effect, so a third is refused.
  walk(*c, second.operation_id, test::to_merged, 9);
  ASSERT_TRUE(mark_validated(*c, second.operation_id, "callback").ok());
  auto third = create_revert(*c, revert_of(original, target), "user:erin");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third.value.verdict, revert_verdict::already_reverted);
  EXPECT_EQ(third.value.current_revert, second.operation_id);
  EXPECT_EQ(db.scalar("SELECT COUNT(*) FROM operation WHERE revert_of = '" + original + "'"), "2");
}

// A revert is created on the original's binding, which is keyed by repository too: the same
// subject and target in another repository, held by a change in flight there, neither blocks it
// nor is touched, and the revert's row carries the original's repository and branch.
TEST(RevertRepo, ARevertTakesTheOriginalsBindingInItsRepository) {
  test_database db;
  auto c = db.connect();
  const std::string target = "repo/placed.yaml";
  auto original = validated_op(*c, target, "team/beta");
  auto elsewhere = new_op(*c, "erin", target, "erin", "team/alpha");  // in flight in another repository

  auto revert = revert_of(original, target);
  revert.repository = "team/beta";
  revert.target_branch = "main";
  auto r = create_revert(*c, revert, "user:erin");
  ASSERT_TRUE(r.ok()) << r.error.message;
  EXPECT_EQ(r.value.verdict, revert_verdict::allowed);
  EXPECT_EQ(r.value.created, create_outcome::created);

  auto row = load_operation(*c, revert.operation_id);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row.value.repository, "team/beta");
  EXPECT_EQ(row.value.target_branch, "main");
  EXPECT_EQ(find_binding(*c, "erin", "team/beta", target).value.operation_id, revert.operation_id);
  auto other = find_binding(*c, "erin", "team/alpha", target);
  EXPECT_EQ(other.value.operation_id, elsewhere);
  EXPECT_EQ(other.value.phase, workflow::phase::APPROVAL_SENDING);
  auto history = test::binding_history(*c, "erin", "team/beta", target);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[1].replaced_operation_id, original);
  EXPECT_EQ(history[1].replaced_phase, "VALIDATED");
}
