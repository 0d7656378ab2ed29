#include "service/end_change.hpp"

#include <gtest/gtest.h>

namespace changeflow::service {
namespace {

using workflow::actor_kind;
using workflow::phase;
using workflow::step;

TEST(PlanEnd, CancelBeforeMergeWithdrawsWhatIsOpen) {
  auto pending = plan_end(end_kind::cancel, step::APPROVAL_SENT, actor_kind::requester, true, false);
  ASSERT_TRUE(pending.target);
  EXPECT_EQ(*pending.target, step::CANCELLED);
  EXPECT_TRUE(pending.withdraw_approval);
  EXPECT_FALSE(pending.read_mr);

  auto mr_open = plan_end(end_kind::cancel, step::CREATE_MR_OPENED, actor_kind::requester, true, true);
  ASSERT_TRUE(mr_open.target);
  EXPECT_FALSE(mr_open.withdraw_approval);  // approved already: nothing pending to withdraw
  EXPECT_TRUE(mr_open.read_mr);
}

TEST(PlanEnd, MergedWinsOverCancel) {
  for (auto s : {step::HANDLE_MERGED, step::HANDLE_ALREADY_MERGED, step::BATCH_MERGED, step::DEPLOY_TIMEOUT,
                 step::DEPLOY_FAILED, step::CALLED_BACK}) {
    auto p = plan_end(end_kind::cancel, s, actor_kind::requester, true, true);
    EXPECT_FALSE(p.target) << workflow::to_string(s);
    EXPECT_EQ(p.refusal, end_status::merged_wins) << workflow::to_string(s);
  }
}

TEST(PlanEnd, RepeatedCancelIsAlreadyEnded) {
  auto p = plan_end(end_kind::cancel, step::CANCELLED, actor_kind::requester, true, true);
  EXPECT_FALSE(p.target);
  EXPECT_EQ(p.refusal, end_status::already_ended);
  auto c = plan_end(end_kind::close, step::CLOSE_SUCCEEDED, actor_kind::operator_only, true, true);
  EXPECT_EQ(c.refusal, end_status::already_ended);
}

// A claimed member's MR is the batch MR, shared with other changes: neither a cancel nor a close may
// close it; the member leaves the batch when the batch settles.
TEST(PlanEnd, RequesterCannotCloseAndNobodyPullsAClaimedBatchMember) {
  EXPECT_FALSE(plan_end(end_kind::close, step::HANDLE_ERROR, actor_kind::requester, false, true).target);
  auto claimed = plan_end(end_kind::cancel, step::BATCH_CLAIMED, actor_kind::requester, true, true);
  EXPECT_FALSE(claimed.target);
  EXPECT_EQ(claimed.refusal, end_status::not_allowed);
  EXPECT_FALSE(plan_end(end_kind::close, step::BATCH_CLAIMED, actor_kind::operator_only, true, true).target);
  // Waiting (not yet in a batch MR) is cancellable.
  EXPECT_TRUE(plan_end(end_kind::cancel, step::BATCH_WAITING, actor_kind::requester, true, false).target);
}

TEST(PlanEnd, OperatorClosesAFailedDeployWithoutTouchingTheMergedMr) {
  for (auto s : {step::DEPLOY_FAILED, step::DEPLOY_TIMEOUT}) {
    auto p = plan_end(end_kind::close, s, actor_kind::operator_only, true, true);
    ASSERT_TRUE(p.target) << workflow::to_string(s);
    EXPECT_EQ(*p.target, step::CLOSE_SUCCEEDED);
    EXPECT_FALSE(p.read_mr);
    EXPECT_FALSE(p.withdraw_approval);
  }
}

// Every failure step can be closed by an operator, and the close reads the MR when there is one.
TEST(PlanEnd, EveryFailureCanBeClosed) {
  for (auto s : workflow::all_steps) {
    auto p = workflow::phase_of(s);
    if (p != phase::CREATE_FAILED && p != phase::HANDLE_FAILED) continue;
    auto plan = plan_end(end_kind::close, s, actor_kind::operator_only, true, true);
    ASSERT_TRUE(plan.target) << workflow::to_string(s) << ": " << plan.message;
    EXPECT_EQ(*plan.target, step::CLOSE_SUCCEEDED);
    EXPECT_EQ(plan.read_mr, s != step::DEPLOY_FAILED) << workflow::to_string(s);
    // A forced failure may have stopped a change whose approval is still pending.
    EXPECT_EQ(plan.withdraw_approval, s != step::DEPLOY_FAILED) << workflow::to_string(s);
  }
}

}  // namespace
}  // namespace changeflow::service
