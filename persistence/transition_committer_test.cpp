// The group committer on a database pool without threads: the test runs the pool's queued jobs
// itself, so it decides which transitions are waiting when a committer takes its group.
#include "persistence/transition_committer.hpp"

#include "persistence/repo_test_support.hpp"
#include "tests/support/test_db.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

using namespace changeflow;
using namespace changeflow::persistence;
using changeflow::testing::test_database;
using test::new_op;
using S = workflow::step;

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
  EXPECT_EQ(pool.run_queued(ctx), 1u);
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
