// The batch core, table-driven like decide(): each row is a drive, an event and the action it must
// lead to. No database, no actor, no clock.
#include "workflow/batch_decide.hpp"

#include <gtest/gtest.h>

#include <functional>

using namespace changeflow::workflow::batch;
using K = action::kind;

namespace {

constexpr std::int64_t t0 = 1'000'000;

drive running_batch(std::size_t members = 3, std::int64_t mr = 7) {
  drive d;
  d.batch_id = 42;
  for (std::size_t i = 0; i < members; ++i) d.members.push_back({"op-" + std::to_string(i), 1});
  d.mr_iid = mr;
  d.wait_started_ms = t0;
  return d;
}

mr_view opened(const std::string& pipeline = "", const std::string& pipeline_sha = "abc") {
  mr_view v;
  v.iid = 7;
  v.state = "opened";
  v.sha = "abc";
  v.pipeline_status = pipeline;
  v.pipeline_sha = pipeline_sha;
  return v;
}

mr_view with_state(const std::string& state) {
  auto v = opened();
  v.state = state;
  return v;
}

mr_view failed_call(mr_view::call outcome) {
  mr_view v;
  v.outcome = outcome;
  v.error = "HTTP 503";
  return v;
}

settings defaults() {
  settings s;
  s.polls.short_interval_ms = 1000;
  s.polls.short_attempts = 2;
  s.polls.long_interval_ms = 5000;
  s.polls.timeout_ms = 60000;
  return s;
}

const char* name(K k) {
  switch (k) {
    case K::open_mr: return "open_mr";
    case K::record_mr: return "record_mr";
    case K::read_mr: return "read_mr";
    case K::rebase_mr: return "rebase_mr";
    case K::approve_and_merge: return "approve_and_merge";
    case K::close_and_reread: return "close_and_reread";
    case K::find_and_close: return "find_and_close";
    case K::settle_merged: return "settle_merged";
    case K::settle_failed: return "settle_failed";
    case K::block: return "block";
    case K::poll_later: return "poll_later";
    case K::end: return "end";
  }
  return "?";
}

}  // namespace

TEST(BatchDecide, TheMrIsReadAndActedOnByItsVerdict) {
  struct row {
    const char* what;
    mr_view mr;
    K expected;
    std::optional<failure_cause> cause;
  };
  auto conflict = opened();
  conflict.has_conflicts = true;
  conflict.merge_error = "rebase failed";
  auto behind = opened();
  behind.detailed_merge_status = "need_rebase";
  auto rebasing = opened("failed");
  rebasing.rebase_in_progress = true;
  const std::vector<row> rows = {
      {"no pipeline yet", opened(), K::poll_later, std::nullopt},
      {"pipeline running", opened("running"), K::poll_later, std::nullopt},
      {"pipeline passed on the head", opened("success"), K::approve_and_merge, std::nullopt},
      {"pipeline passed on an older sha", opened("success", "old"), K::poll_later, std::nullopt},
      {"pipeline failed on the head", opened("failed"), K::close_and_reread, failure_cause::pipeline_failed},
      {"pipeline failed on an older sha", opened("failed", "old"), K::poll_later, std::nullopt},
      {"pipeline canceled on the head", opened("canceled"), K::close_and_reread, failure_cause::pipeline_failed},
      {"merged (by anyone)", with_state("merged"), K::settle_merged, std::nullopt},
      {"closed outside", with_state("closed"), K::close_and_reread, failure_cause::mr_closed},
      {"behind the target", behind, K::rebase_mr, std::nullopt},
      {"conflict after a rebase", conflict, K::close_and_reread, failure_cause::rebase_conflict},
      {"rebase in progress", rebasing, K::poll_later, std::nullopt},
  };
  for (const auto& r : rows) {
    auto d = on_mr_read(running_batch(), r.mr, defaults(), t0 + 10);
    EXPECT_EQ(name(d.act.what), std::string(name(r.expected))) << r.what;
    EXPECT_EQ(d.next.cause, r.cause) << r.what;
  }
}

TEST(BatchDecide, ADriveOpensRecordsReadsMergesAndSettlesOnce) {
  auto s = defaults();
  drive d = running_batch(3, 0);
  auto step = begin(d, t0);
  ASSERT_EQ(step.act.what, K::open_mr);
  auto mr = opened();
  step = on_mr_opened(step.next, mr, s, t0 + 5);
  ASSERT_EQ(step.act.what, K::record_mr);
  EXPECT_EQ(step.next.mr_iid, 7);
  EXPECT_EQ(step.next.wait_started_ms, t0 + 5) << "the pipeline wait starts when the MR exists";
  step = on_mr_recorded(step.next, true, false);
  ASSERT_EQ(step.act.what, K::read_mr);
  step = on_mr_read(step.next, opened("running"), s, t0 + 10);
  ASSERT_EQ(step.act.what, K::poll_later);
  EXPECT_EQ(step.act.delay_ms, 1000);
  step = on_poll_tick(step.next, s, t0 + 1010);
  ASSERT_EQ(step.act.what, K::read_mr);
  step = on_mr_read(step.next, opened("success"), s, t0 + 1020);
  ASSERT_EQ(step.act.what, K::approve_and_merge);
  step = on_merge(step.next, merge_answer::merged, opened("success"), s, t0 + 1030);
  ASSERT_EQ(step.act.what, K::settle_merged);
  EXPECT_EQ(step.act.text, "batch MR !7 merged");
  step = on_settled(step.next, true, false, "succeeded", s);
  EXPECT_EQ(step.act.what, K::end);
  EXPECT_EQ(step.act.text, "succeeded");
}

TEST(BatchDecide, PollsFollowTheTiersAndTimeOutIntoTheFailurePath) {
  auto s = defaults();
  auto d = running_batch();
  std::vector<std::int64_t> delays;
  std::int64_t now = t0;
  decision step{d, {}};
  for (int i = 0; i < 100; ++i) {
    step = on_mr_read(step.next, opened("running"), s, now);
    if (step.act.what != K::poll_later) break;
    delays.push_back(step.act.delay_ms);
    now += step.act.delay_ms;
  }
  ASSERT_GE(delays.size(), 3u);
  EXPECT_EQ(delays[0], 1000);
  EXPECT_EQ(delays[1], 1000);
  EXPECT_EQ(delays[2], 5000) << "after short_attempts, the long interval";
  EXPECT_EQ(step.act.what, K::close_and_reread);
  EXPECT_EQ(step.next.cause, failure_cause::pipeline_timeout);
}

TEST(BatchDecide, FailedCallsBackOffThenFailAndRefusalsFailAtOnce) {
  auto s = defaults();
  auto d = running_batch();
  std::vector<std::int64_t> delays;
  decision step{d, {}};
  for (int i = 0; i < 20; ++i) {
    step = on_mr_read(step.next, failed_call(mr_view::call::retryable), s, t0);
    if (step.act.what != K::poll_later) break;
    delays.push_back(step.act.delay_ms);
  }
  EXPECT_EQ(delays.size(), static_cast<std::size_t>(s.max_call_failures));
  EXPECT_EQ(delays.front(), 200);
  EXPECT_EQ(delays.back(), 5000) << "capped";
  EXPECT_EQ(step.act.what, K::close_and_reread);
  EXPECT_EQ(step.next.cause, failure_cause::gitlab_failing);
  // A success resets the count.
  auto once = on_mr_read(running_batch(), failed_call(mr_view::call::retryable), s, t0);
  EXPECT_EQ(on_mr_read(once.next, opened("running"), s, t0).next.call_failures, 0);
  // A refused commit fails at once, as a failure the members' files may explain.
  auto refused = on_mr_opened(running_batch(3, 0), failed_call(mr_view::call::refused), s, t0);
  EXPECT_EQ(refused.act.what, K::find_and_close) << "no MR recorded: look for it on the branch";
  EXPECT_EQ(refused.next.cause, failure_cause::commit_refused);
  // A commit refused because a member's file moved since its base names that cause.
  auto moved = failed_call(mr_view::call::refused);
  moved.content_conflict = true;
  EXPECT_EQ(on_mr_opened(running_batch(3, 0), moved, s, t0).next.cause, failure_cause::content_conflict);
  // So does a rebase that was not requested because a member's file moved on the target.
  auto not_rebased = opened("success");
  not_rebased.content_conflict = true;
  auto stopped = on_rebase_requested(running_batch(), not_rebased, s, t0);
  EXPECT_EQ(stopped.act.what, K::close_and_reread);
  EXPECT_EQ(stopped.next.cause, failure_cause::content_conflict);
}

TEST(BatchDecide, MergeAnswers) {
  struct row {
    merge_answer answer;
    K expected;
    std::optional<failure_cause> cause;
  };
  const std::vector<row> rows = {
      {merge_answer::merged, K::settle_merged, std::nullopt},
      {merge_answer::not_yet, K::poll_later, std::nullopt},
      {merge_answer::needs_rebase, K::poll_later, std::nullopt},
      {merge_answer::retryable, K::poll_later, std::nullopt},
      {merge_answer::closed, K::close_and_reread, failure_cause::mr_closed},
      {merge_answer::approval_refused, K::close_and_reread, failure_cause::approval_refused},
      {merge_answer::refused, K::close_and_reread, failure_cause::merge_refused},
      {merge_answer::content_conflict, K::close_and_reread, failure_cause::content_conflict},
  };
  for (const auto& r : rows) {
    auto d = on_merge(running_batch(), r.answer, opened("success"), defaults(), t0);
    EXPECT_EQ(name(d.act.what), std::string(name(r.expected))) << static_cast<int>(r.answer);
    EXPECT_EQ(d.next.cause, r.cause) << static_cast<int>(r.answer);
  }
}

// The failure path: close and read again; merged wins; otherwise the plan decides the settlement.
TEST(BatchDecide, TheFailurePathSettlesByItsPlanAndMergedWins) {
  auto s = defaults();
  struct row {
    const char* what;
    failure_cause cause;
    std::size_t members;
    int depth;
    failure_plan plan;
  };
  const std::vector<row> rows = {
      {"pipeline failed, several members", failure_cause::pipeline_failed, 4, 0, failure_plan::bisect},
      {"pipeline failed, one member", failure_cause::pipeline_failed, 1, 2, failure_plan::fail_alone},
      {"pipeline failed at the split bound", failure_cause::pipeline_failed, 4, 6, failure_plan::fail_all},
      {"conflict, several members", failure_cause::rebase_conflict, 4, 0, failure_plan::bisect},
      {"file moved, several members", failure_cause::content_conflict, 4, 0, failure_plan::bisect},
      {"file moved, one member", failure_cause::content_conflict, 1, 3, failure_plan::fail_alone},
      {"file moved at the split bound", failure_cause::content_conflict, 3, 6, failure_plan::fail_all},
      {"MR closed", failure_cause::mr_closed, 4, 0, failure_plan::requeue_bounded},
      {"GitLab failing", failure_cause::gitlab_failing, 1, 0, failure_plan::requeue_bounded},
  };
  for (const auto& r : rows) {
    auto d = running_batch(r.members);
    d.depth = r.depth;
    auto step = start_failure(d, r.cause, "detail");
    ASSERT_EQ(step.act.what, K::close_and_reread) << r.what;
    EXPECT_EQ(step.next.failure, std::string(describe(r.cause)) + ": detail") << r.what;
    auto settled = on_reread(step.next, with_state("closed"), s);
    ASSERT_EQ(settled.act.what, K::settle_failed) << r.what;
    EXPECT_EQ(settled.act.plan, r.plan) << r.what;
    if (r.plan == failure_plan::bisect) {
      ASSERT_EQ(settled.act.groups.size(), 2u) << r.what;
      EXPECT_EQ(settled.act.groups[0], (std::vector<std::string>{"op-0", "op-1"}));
    }
    auto merged = on_reread(step.next, with_state("merged"), s);
    EXPECT_EQ(merged.act.what, K::settle_merged) << r.what;
    EXPECT_EQ(merged.act.text, "batch MR !7 merged (merged wins over the failure)");
  }
  // A second failure while failing keeps the first cause.
  auto first = start_failure(running_batch(), failure_cause::pipeline_failed, "x");
  auto again = start_failure(first.next, failure_cause::gitlab_failing, "y");
  EXPECT_EQ(again.next.cause, failure_cause::pipeline_failed);
  // Requeue bounded by attempts: the member claimed max_attempts times leaves.
  auto d = running_batch(2);
  d.members[1].batch_attempts = 3;
  auto bounded = on_reread(start_failure(d, failure_cause::mr_closed, "").next, with_state("closed"), s);
  EXPECT_EQ(bounded.act.bounded.requeue, (std::vector<std::string>{"op-0"}));
  EXPECT_EQ(bounded.act.bounded.leave, (std::vector<std::string>{"op-1"}));
  EXPECT_NE(bounded.act.leaving_cause.find("batch.max_attempts = 3"), std::string::npos);
}

TEST(BatchDecide, AnUnreadableMrAfterAFailureBlocksTheBatch) {
  auto s = defaults();
  auto step = start_failure(running_batch(), failure_cause::pipeline_failed, "");
  for (int i = 0; i < s.max_call_failures; ++i) {
    step = on_reread(step.next, failed_call(mr_view::call::retryable), s);
    ASSERT_EQ(step.act.what, K::poll_later) << i;
    step = on_poll_tick(step.next, s, t0);
    ASSERT_EQ(step.act.what, K::close_and_reread) << "the tick re-runs the failure path";
  }
  step = on_reread(step.next, failed_call(mr_view::call::retryable), s);
  EXPECT_EQ(step.act.what, K::block);
  EXPECT_NE(step.act.text.find("MR state unknown"), std::string::npos);
}

TEST(BatchDecide, SettlementsAndOperatorRequests) {
  auto s = defaults();
  EXPECT_EQ(on_settled(running_batch(), false, true, "succeeded", s).act.text, "preempted");
  auto retry = on_settled(running_batch(), false, false, "succeeded", s);
  EXPECT_EQ(retry.act.what, K::poll_later);
  EXPECT_EQ(retry.act.delay_ms, s.settle_retry_ms);
  EXPECT_EQ(on_mr_recorded(running_batch(), false, true).act.what, K::end);
  EXPECT_EQ(on_mr_recorded(running_batch(), false, false).act.what, K::read_mr) << "the MR is known in memory";
  auto d = running_batch();
  d.settle_requested = true;
  auto settle = on_mr_read(d, opened("running"), s, t0);
  EXPECT_EQ(settle.next.cause, failure_cause::operator_settled);
  EXPECT_EQ(begin(running_batch(0, 0), t0).next.cause, failure_cause::no_members);
  EXPECT_EQ(begin(running_batch(2, 9), t0).act.what, K::read_mr) << "a resumed batch with its MR reads it";
  EXPECT_EQ(on_rebase_requested(running_batch(), opened(), s, t0).act.what, K::poll_later);
}

// A round claims in every partition with waiting changes that this coordinator neither claims nor
// drives: partitions batch in parallel, one partition never twice.
TEST(BatchDecide, ARoundClaimsEveryIdlePartitionOnce) {
  const partition alpha{"team/alpha", "main"}, beta_main{"team/beta", "main"}, beta_rel{"team/beta", "release"};
  using A = partition_activity;
  struct round_case {
    const char* name;
    std::vector<partition> waiting;
    std::vector<std::pair<partition, partition_activity>> here;
    std::vector<partition> claims;
  };
  const round_case cases[] = {
      {"nothing waits", {}, {}, {}},
      {"every waiting partition, in order", {beta_rel, alpha, beta_main}, {}, {alpha, beta_main, beta_rel}},
      {"a driven partition is skipped", {alpha, beta_main}, {{alpha, A::driving}}, {beta_main}},
      {"a partition being claimed is skipped", {alpha, beta_main}, {{beta_main, A::claiming}}, {alpha}},
      {"an idle entry does not block", {alpha}, {{alpha, A::idle}}, {alpha}},
      {"listed twice, claimed once", {alpha, alpha}, {}, {alpha}},
      {"branches of one repository are separate partitions",
       {beta_main, beta_rel},
       {{beta_main, A::driving}},
       {beta_rel}},
      {"the same branch name in two repositories is two partitions",
       {alpha, beta_main},
       {{alpha, A::driving}},
       {beta_main}},
      {"everything busy", {alpha, beta_main}, {{alpha, A::driving}, {beta_main, A::claiming}}, {}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(partitions_to_claim(c.waiting, c.here), c.claims) << c.name;
  }
  EXPECT_EQ(to_string(beta_rel), "team/beta@release");
}
