// A cancel racing the merge of its change, at the database: the request actor's merge result and
// service/end_change's ended step are both guarded transitions of the same row, written from the
// same version. Each test fixes one order of the two writes exactly (no threads, no timing) and
// then lets the loser do what its code does on a guard miss: re-read the row and decide again
// (end_change: plan_end on the fresh row). The documented outcome: merged wins over cancel, and the
// timeline holds exactly one transition out of HANDLE_MERGING, never a lost or a doubled one.

#include "service/end_change.hpp"

#include "persistence/operation_repo.hpp"
#include "persistence/repo_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace changeflow::service {
namespace {

using persistence::db_outcome;
using persistence::test::new_op;
using persistence::test::walk;
using workflow::actor_kind;
using workflow::step;

constexpr std::int64_t mr_iid = 7;

class EndChangeRace : public ::testing::Test {
 protected:
  void SetUp() override {
    conn_ = db_.connect();
    id_ = new_op(*conn_, "alice", "race");
    // The actor has asked GitLab to merge: the row waits in HANDLE_MERGING with its MR.
    version_ = walk(*conn_, id_,
                    {step::APPROVAL_SENT, step::APPROVAL_APPROVED, step::HANDLE_STARTED, step::HANDLE_APPROVED,
                     step::HANDLE_MERGING},
                    mr_iid);
  }

  persistence::operation_row row() {
    auto r = persistence::load_operation(*conn_, id_);
    EXPECT_TRUE(r.ok()) << r.error.message;
    return r.value;
  }

  /// The request actor's write of its merge reply ("merged"), from the version it read.
  persistence::db_result<std::int64_t> actor_records_merge(std::int64_t read_version) {
    persistence::transition_request t;
    t.operation_id = id_;
    t.expected_version = read_version;
    t.from = step::HANDLE_MERGING;
    t.to = step::HANDLE_MERGED;
    t.cause = "merge: merged";
    t.mr_iid = mr_iid;
    return persistence::transition(*conn_, t);
  }

  /// end_change's write, as it writes it: the target its plan and its MR read chose (CANCELLED when
  /// the close closed the MR, HANDLE_ALREADY_MERGED when the close found it merged).
  persistence::db_result<std::int64_t> cancel_writes(step from, std::int64_t read_version, step target) {
    persistence::transition_request t;
    t.operation_id = id_;
    t.expected_version = read_version;
    t.from = from;
    t.to = target;
    t.by = actor_kind::requester;
    t.cause = "cancelled by the requester";
    t.actor = "user:alice";
    t.clear_wake = true;
    return persistence::transition(*conn_, t);
  }

  /// Order 2: the cancel writes `target` first, from the version it read; the actor's merge write,
  /// from the version it read before it asked GitLab to merge, then loses its guard and changes
  /// nothing. Returns the row as it is afterwards.
  persistence::operation_row cancel_first_then_actor(step target) {
    const auto actor_read = version_;
    const auto cancel_read = row();
    auto first = cancel_writes(cancel_read.step, cancel_read.version, target);
    EXPECT_TRUE(first.ok()) << first.error.message;
    auto late = actor_records_merge(actor_read);
    EXPECT_EQ(late.outcome, db_outcome::preempted);
    auto now = row();
    EXPECT_EQ(now.version, first.value);
    return now;
  }

  /// Transitions out of HANDLE_MERGING on the timeline, by target step.
  std::vector<step> moves_out_of_merging() {
    auto events = persistence::list_events(*conn_, id_);
    EXPECT_TRUE(events.ok()) << events.error.message;
    std::vector<step> out;
    for (const auto& e : events.value) {
      if (e.from_step == step::HANDLE_MERGING) out.push_back(e.to_step);
    }
    return out;
  }

  changeflow::testing::test_database db_;
  std::unique_ptr<sql::Connection> conn_;
  std::string id_;
  std::int64_t version_ = 0;
};

// Before: the plan of a cancel in HANDLE_MERGING reads (and closes) the MR before it writes.
TEST_F(EndChangeRace, ACancelDuringTheMergeReadsTheMrFirst) {
  auto plan = plan_end(end_kind::cancel, step::HANDLE_MERGING, actor_kind::requester, false, true);
  ASSERT_TRUE(plan.target);
  EXPECT_EQ(*plan.target, step::CANCELLED);
  EXPECT_TRUE(plan.read_mr);
}

// Order 1: the merge is written first. The cancel, which read the row before it, loses its guard;
// its re-read finds the change merged and it refuses: merged wins, nothing more is written.
TEST_F(EndChangeRace, MergeWrittenFirstTheCancelLosesAndMergedWins) {
  const auto cancel_read = row();  // end_change's load, before the merge lands
  ASSERT_EQ(cancel_read.step, step::HANDLE_MERGING);

  auto merged = actor_records_merge(version_);
  ASSERT_TRUE(merged.ok()) << merged.error.message;

  auto late = cancel_writes(cancel_read.step, cancel_read.version, step::CANCELLED);
  EXPECT_EQ(late.outcome, db_outcome::preempted);

  const auto now = row();
  EXPECT_EQ(now.step, step::HANDLE_MERGED);
  auto replan =
      plan_end(end_kind::cancel, now.step, actor_kind::requester, now.approval_id.has_value(), now.mr_iid.has_value());
  EXPECT_FALSE(replan.target);
  EXPECT_EQ(replan.refusal, end_status::merged_wins);

  EXPECT_EQ(moves_out_of_merging(), std::vector<step>{step::HANDLE_MERGED});
  EXPECT_EQ(now.version, merged.value);  // the losing write changed nothing
}

// Order 2: the cancel's close found the MR merged, so the cancel records merged wins
// (HANDLE_ALREADY_MERGED) before the actor's own merge write, which then loses its guard. The
// actor's re-read finds the change merged: one move out of HANDLE_MERGING, into the merged phase.
TEST_F(EndChangeRace, CancelWrittenFirstRecordsMergedWinsAndTheActorLoses) {
  const auto now = cancel_first_then_actor(step::HANDLE_ALREADY_MERGED);
  EXPECT_EQ(now.step, step::HANDLE_ALREADY_MERGED);
  EXPECT_EQ(workflow::phase_of(now.step), workflow::phase::MERGED);
  EXPECT_EQ(moves_out_of_merging(), std::vector<step>{step::HANDLE_ALREADY_MERGED});
  // A repeated cancel now refuses: the change is in effect (or about to be).
  auto again = plan_end(end_kind::cancel, now.step, actor_kind::requester, false, true);
  EXPECT_FALSE(again.target);
  EXPECT_EQ(again.refusal, end_status::merged_wins);
}

// Order 2 when the close won at GitLab (the MR is closed, so the merge can no longer land): the
// cancel ends the change; the actor's write from the version it read loses, and its re-read finds
// the change ended. Still exactly one move out of HANDLE_MERGING.
TEST_F(EndChangeRace, CancelWrittenFirstWithTheMrClosedEndsTheChangeOnce) {
  const auto now = cancel_first_then_actor(step::CANCELLED);
  EXPECT_EQ(now.step, step::CANCELLED);
  EXPECT_EQ(moves_out_of_merging(), std::vector<step>{step::CANCELLED});
  auto again = plan_end(end_kind::cancel, now.step, actor_kind::requester, false, true);
  EXPECT_EQ(again.refusal, end_status::already_ended);
}

}  // namespace
}  // namespace changeflow::service
