// What happens to the members of a failed batch: pure decisions, no database, no actor.
#include "actors/batch_coordinator.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using namespace changeflow::actors;

namespace {
effects::batch_member_change member(const std::string& id, int attempts) {
  effects::batch_member_change m;
  m.operation_id = id;
  m.batch_attempts = attempts;
  return m;
}
}  // namespace

TEST(BatchFailure, PipelineFailureBisectsUntilAloneAndIsBoundedBySplits) {
  EXPECT_EQ(plan_failure(failure_cause::pipeline_failed, 6, 0, 6), failure_plan::bisect);
  EXPECT_EQ(plan_failure(failure_cause::pipeline_failed, 1, 3, 6), failure_plan::fail_alone);
  EXPECT_EQ(plan_failure(failure_cause::pipeline_failed, 2, 6, 6), failure_plan::fail_all);
  auto h = halves(std::vector<effects::batch_member_change>{member("a", 1), member("b", 1), member("c", 1)});
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(h[1], (std::vector<std::string>{"c"}));
}

TEST(BatchFailure, FailuresDecidedByTheFilesAreBisectedThenBoundedByAttempts) {
  for (auto cause : {failure_cause::rebase_conflict, failure_cause::commit_refused}) {
    EXPECT_EQ(plan_failure(cause, 4, 0, 6), failure_plan::bisect) << describe(cause);
    // Alone, or at the split bound, a member is requeued until its attempts run out.
    EXPECT_EQ(plan_failure(cause, 1, 2, 6), failure_plan::requeue_bounded) << describe(cause);
    EXPECT_EQ(plan_failure(cause, 4, 6, 6), failure_plan::requeue_bounded) << describe(cause);
  }
}

TEST(BatchFailure, FailuresThatSayNothingAboutOneMemberRequeueTheBatchBounded) {
  for (auto cause : {failure_cause::approval_refused, failure_cause::merge_refused, failure_cause::mr_closed,
                     failure_cause::gitlab_failing, failure_cause::pipeline_timeout, failure_cause::swept,
                     failure_cause::operator_settled, failure_cause::no_members}) {
    EXPECT_EQ(plan_failure(cause, 5, 0, 6), failure_plan::requeue_bounded) << describe(cause);
    EXPECT_EQ(plan_failure(cause, 1, 0, 6), failure_plan::requeue_bounded) << describe(cause);
  }
}

TEST(BatchFailure, MembersLeaveOnceClaimedMaxAttemptsTimes) {
  // Attempts count the failed batch itself: 3 of 3 leaves, 2 of 3 waits again.
  auto split = split_by_attempts(std::vector<effects::batch_member_change>{member("new", 1), member("twice", 2),
                                                                           member("third", 3), member("over", 5)},
                                 3);
  EXPECT_EQ(split.requeue, (std::vector<std::string>{"new", "twice"}));
  EXPECT_EQ(split.leave, (std::vector<std::string>{"third", "over"}));
  // A bound of 1: the first failure is the last.
  EXPECT_EQ(split_by_attempts(std::vector<effects::batch_member_change>{member("a", 1)}, 1).leave,
            (std::vector<std::string>{"a"}));
  EXPECT_TRUE(split_by_attempts(std::vector<effects::batch_member_change>{member("a", 1)}, 2).leave.empty());
}

TEST(BatchFailure, CausesNameWhatHappened) {
  EXPECT_EQ(describe(failure_cause::rebase_conflict), "rebase conflict with the target branch");
  EXPECT_EQ(describe(failure_cause::commit_refused), "GitLab refused the batch commit");
  EXPECT_EQ(describe(failure_cause::approval_refused), "approval refused");
  EXPECT_EQ(describe(failure_cause::merge_refused), "merge refused");
  EXPECT_EQ(describe(failure_cause::mr_closed), "MR closed");
}

TEST(BatchVerdict, AFailedRebaseWithConflictsEndsTheBatch) {
  effects::batch_mr_view mr;
  mr.state = "opened";
  mr.has_conflicts = true;
  mr.detailed_merge_status = "conflict";
  EXPECT_EQ(classify(mr), effects::batch_verdict::needs_rebase);  // not rebased yet: try it
  mr.rebase_in_progress = true;
  mr.detailed_merge_status = "checking";
  EXPECT_EQ(classify(mr), effects::batch_verdict::running);
  mr.rebase_in_progress = false;
  mr.detailed_merge_status = "conflict";
  mr.merge_error = "Rebase failed. Please rebase locally";
  EXPECT_EQ(classify(mr), effects::batch_verdict::conflict);
  mr.has_conflicts = false;
  mr.detailed_merge_status = "mergeable";  // a merge_error left from an earlier try decides nothing
  EXPECT_NE(classify(mr), effects::batch_verdict::conflict);
}
