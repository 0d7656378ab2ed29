#include "workflow/decide.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>

using namespace changeflow::workflow;
using status = call_reply::status;
using merge_result = call_reply::merge_result;

namespace {
settings test_settings() {
  settings cfg;
  cfg.polls = {100, 3, 1000, 10000};
  cfg.merge_max_attempts = 3;
  cfg.approval_wait_ms = 50000;
  return cfg;
}

operation_state at(step s, std::int64_t entered = 0) {
  operation_state st;
  st.operation_id = "op";
  st.current = s;
  st.step_entered_ms = entered;
  st.mr_iid = 7;
  st.mr_sha = "sha1";
  return st;
}

call_reply ok_reply(call_kind k) {
  call_reply r;
  r.kind = k;
  r.outcome = status::ok;
  return r;
}

/// An MR read: open, its pipeline passed on its head "s".
call_reply pipeline_passed() {
  auto r = ok_reply(call_kind::read_pipeline);
  r.mr_state = "opened";
  r.sha = r.pipeline_sha = "s";
  r.pipeline_status = "success";
  return r;
}

event reply_of(call_reply r) {
  return reply{std::move(r)};
}

bool has_effect(const decision& d, effect::kind k, std::optional<call_kind> call = {}) {
  for (const auto& e : d.effects) {
    if (e.what == k && (!call || e.call.kind == *call)) return true;
  }
  return false;
}

// Steps in which a reply of each kind is expected; every other step must refuse it.
const std::map<call_kind, std::set<step>> valid_steps = {
    {call_kind::submit_approval, {step::APPROVAL_SENDING}},
    {call_kind::create_mr, {step::CREATE_STARTED}},
    {call_kind::read_pipeline, {step::CREATE_MR_OPENED, step::CREATE_PIPELINE_PENDING}},
    {call_kind::approve_bots, {step::HANDLE_STARTED, step::CREATE_SUCCEEDED}},
    {call_kind::try_merge, {step::HANDLE_APPROVED, step::HANDLE_MERGING, step::HANDLE_PIPELINE_PENDING}},
    {call_kind::rebase, {step::HANDLE_REBASING}},
    {call_kind::read_rebase, {step::HANDLE_REBASING, step::REBASE_PENDING}},
};
}  // namespace

TEST(Decide, RepliesOutsideTheirStepAreRefused) {
  auto cfg = test_settings();
  for (const auto& [kind, steps] : valid_steps) {
    for (auto s : all_steps) {
      if (steps.count(s)) continue;
      auto d = decide(at(s), reply_of(ok_reply(kind)), cfg, 0);
      EXPECT_TRUE(d.refused) << to_string(kind) << " in " << to_string(s);
      EXPECT_FALSE(d.next.has_value());
      EXPECT_TRUE(d.effects.empty());
    }
  }
}

TEST(Decide, EveryDecisionStaysInsideTheTransitionTable) {
  auto cfg = test_settings();
  const status statuses[] = {status::ok, status::retryable, status::refused, status::overloaded};
  const merge_result merges[] = {
      merge_result::none,         merge_result::merged,         merge_result::not_mergeable_yet,
      merge_result::needs_rebase, merge_result::sha_mismatch,   merge_result::pipeline_failed,
      merge_result::closed,       merge_result::already_merged, merge_result::content_conflict};
  int decisions = 0;
  for (auto s : all_steps) {
    for (std::int64_t now : {0LL, 5000LL, 1000000LL}) {
      auto d = decide(at(s), resume{}, cfg, now);
      if (d.next) {
        EXPECT_TRUE(is_allowed(s, d.next->to)) << to_string(s);
      }
      EXPECT_EQ(d.note.find("not in the table"), std::string::npos) << d.note;
      ++decisions;
      for (const auto& [kind, steps] : valid_steps) {
        if (!steps.count(s)) continue;
        for (auto st : statuses) {
          for (auto m : merges) {
            call_reply r = ok_reply(kind);
            r.outcome = st;
            r.merge = m;
            for (const char* pipeline : {"", "running", "success", "failed"}) {
              r.pipeline_status = pipeline;
              auto d2 = decide(at(s), reply_of(r), cfg, now);
              if (d2.next) {
                EXPECT_TRUE(is_allowed(s, d2.next->to)) << to_string(s) << " -> " << to_string(d2.next->to);
              }
              EXPECT_EQ(d2.note.find("not in the table"), std::string::npos) << d2.note;
              // Every decision either moves, waits, calls, or is explicitly refused: never silent.
              EXPECT_TRUE(d2.next || !d2.effects.empty() || d2.refused) << to_string(s) << " " << to_string(kind);
              ++decisions;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(decisions, 1000);
}

TEST(Decide, ResumeRunsTheStepsCall) {
  auto cfg = test_settings();
  struct c {
    step s;
    call_kind k;
  } cases[] = {
      {step::APPROVAL_SENDING, call_kind::submit_approval},  {step::CREATE_STARTED, call_kind::create_mr},
      {step::CREATE_MR_OPENED, call_kind::read_pipeline},    {step::CREATE_PIPELINE_PENDING, call_kind::read_pipeline},
      {step::HANDLE_STARTED, call_kind::approve_bots},       {step::CREATE_SUCCEEDED, call_kind::approve_bots},
      {step::HANDLE_APPROVED, call_kind::try_merge},         {step::HANDLE_MERGING, call_kind::try_merge},
      {step::HANDLE_PIPELINE_PENDING, call_kind::try_merge}, {step::HANDLE_REBASING, call_kind::read_rebase},
      {step::REBASE_PENDING, call_kind::read_rebase},
  };
  for (const auto& tc : cases) {
    auto d = decide(at(tc.s), resume{}, cfg, 0);
    EXPECT_FALSE(d.next.has_value()) << to_string(tc.s);
    EXPECT_TRUE(has_effect(d, effect::kind::call, tc.k)) << to_string(tc.s);
  }
}

TEST(Decide, StepsWithoutActorWorkStop) {
  auto cfg = test_settings();
  for (auto s : all_steps) {
    if (needs_actor(s)) continue;
    auto d = decide(at(s), resume{}, cfg, 0);
    EXPECT_TRUE(has_effect(d, effect::kind::stop)) << to_string(s);
  }
}

TEST(Decide, ApprovedGoesByOrderMrAndBatchSwitch) {
  auto cfg = test_settings();
  auto s = at(step::APPROVAL_APPROVED);
  s.mr_iid.reset();
  EXPECT_EQ(decide(s, resume{}, cfg, 0).next->to, step::CREATE_STARTED);
  s.mr_iid = 12;  // legacy: the approval carried the MR
  EXPECT_EQ(decide(s, resume{}, cfg, 0).next->to, step::HANDLE_STARTED);
  s.mr_iid.reset();
  cfg.batch_enabled = true;
  auto d = decide(s, resume{}, cfg, 0);
  EXPECT_EQ(d.next->to, step::BATCH_WAITING);
  EXPECT_TRUE(has_effect(d, effect::kind::stop));  // the coordinator takes over
}

TEST(Decide, LegacyOrderAsksForApprovalAfterTheMr) {
  auto cfg = test_settings();
  auto s = at(step::CREATE_SUCCEEDED);
  s.order = flow::create_then_approve;
  EXPECT_EQ(decide(s, resume{}, cfg, 0).next->to, step::APPROVAL_SENDING);
  // Once approved (or in the new order), the bots approve the MR from CREATE_SUCCEEDED itself:
  // no write of HANDLE_STARTED first.
  s.approval_id = "A-1";
  auto approve = decide(s, resume{}, cfg, 0);
  EXPECT_FALSE(approve.next.has_value());
  EXPECT_TRUE(has_effect(approve, effect::kind::call, call_kind::approve_bots));
  s.order = flow::approve_then_create;
  s.approval_id.clear();
  approve = decide(s, resume{}, cfg, 0);
  EXPECT_FALSE(approve.next.has_value());
  EXPECT_TRUE(has_effect(approve, effect::kind::call, call_kind::approve_bots));
}

// The passed pipeline is written with the approvals' outcome wherever the approvals come next
// from CREATE_SUCCEEDED; in the legacy order before its approval, the approval request comes next,
// and the step is written on its own.
TEST(Decide, APassedPipelineIsWrittenWithTheNextStepWhereTheApprovalsFollow) {
  auto cfg = test_settings();
  auto r = pipeline_passed();
  for (auto from : {step::CREATE_MR_OPENED, step::CREATE_PIPELINE_PENDING}) {
    auto s = at(from);
    auto d = decide(s, reply_of(r), cfg, 0);
    ASSERT_TRUE(d.next);
    EXPECT_EQ(d.next->to, step::CREATE_SUCCEEDED);
    EXPECT_TRUE(d.next->with_next) << to_string(from);
    EXPECT_TRUE(d.effects.empty()) << "no effect may run before the step it follows is written";
    s.order = flow::create_then_approve;
    EXPECT_FALSE(decide(s, reply_of(r), cfg, 0).next->with_next) << "legacy order, no approval yet";
    s.approval_id = "A-1";
    EXPECT_TRUE(decide(s, reply_of(r), cfg, 0).next->with_next) << "legacy order, approved: the bots approve next";
  }
  // A failed pipeline is written at once.
  r.pipeline_status = "failed";
  EXPECT_FALSE(decide(at(step::CREATE_MR_OPENED), reply_of(r), cfg, 0).next->with_next);
}

TEST(Decide, ApprovalSubmitOutcomes) {
  auto cfg = test_settings();
  auto r = ok_reply(call_kind::submit_approval);
  r.approval_id = "A-9";
  auto d = decide(at(step::APPROVAL_SENDING), reply_of(r), cfg, 0);
  ASSERT_TRUE(d.next);
  EXPECT_EQ(d.next->to, step::APPROVAL_SENT);
  EXPECT_EQ(d.next->approval_id, "A-9");
  EXPECT_EQ(d.next->wake_in_ms, cfg.approval_wait_ms);  // the deadline is stored (durable timer)

  r.outcome = status::refused;
  EXPECT_EQ(decide(at(step::APPROVAL_SENDING), reply_of(r), cfg, 0).next->to, step::APPROVAL_SUBMIT_FAILED);
  r.outcome = status::overloaded;
  EXPECT_EQ(decide(at(step::APPROVAL_SENDING), reply_of(r), cfg, 0).next->to, step::CREATE_OVERLOADED);
  r.outcome = status::retryable;
  auto wait = decide(at(step::APPROVAL_SENDING), reply_of(r), cfg, 0);
  EXPECT_FALSE(wait.next);
  EXPECT_TRUE(has_effect(wait, effect::kind::timer));
  auto late = decide(at(step::APPROVAL_SENDING), reply_of(r), cfg, 20000);  // past the poll budget
  EXPECT_EQ(late.next->to, step::APPROVAL_SUBMIT_FAILED);
}

TEST(Decide, AFailedCallIsAFailedAttemptOfTheStepItWasMadeIn) {
  auto cfg = test_settings();
  auto r = ok_reply(call_kind::create_mr);
  r.mr_iid = 7;
  EXPECT_FALSE(decide(at(step::CREATE_STARTED), reply_of(r), cfg, 0).failed);  // success: nothing to record
  r.outcome = status::retryable;
  r.http_status = 503;
  r.error = "GitLab answered 503";
  auto retry = decide(at(step::CREATE_STARTED), reply_of(r), cfg, 0);
  EXPECT_FALSE(retry.next);   // retried in the same step...
  ASSERT_TRUE(retry.failed);  // ...and recorded as a failed attempt with its status
  EXPECT_EQ(retry.failed->http_status, 503);
  EXPECT_EQ(retry.failed->error, "GitLab answered 503");
  auto given_up = decide(at(step::CREATE_STARTED), reply_of(r), cfg, 20000);  // past the poll budget
  ASSERT_TRUE(given_up.next);
  EXPECT_EQ(given_up.next->to, step::CREATE_ERROR);
  EXPECT_TRUE(given_up.failed);
  r.outcome = status::refused;
  r.http_status = 422;
  auto refused = decide(at(step::CREATE_STARTED), reply_of(r), cfg, 0);
  EXPECT_EQ(refused.next->to, step::CREATE_GITLAB_REFUSED);
  ASSERT_TRUE(refused.failed);
  EXPECT_EQ(refused.failed->http_status, 422);
  // A reply the state does not expect is refused, not counted.
  EXPECT_FALSE(decide(at(step::HANDLE_STARTED), reply_of(r), cfg, 0).failed);
}

TEST(Decide, ApprovalDeadline) {
  auto cfg = test_settings();
  auto before = decide(at(step::APPROVAL_SENT, 1000), resume{}, cfg, 2000);
  EXPECT_FALSE(before.next);
  ASSERT_TRUE(has_effect(before, effect::kind::timer));
  EXPECT_EQ(before.effects[0].delay_ms, 49000);
  auto after = decide(at(step::APPROVAL_SENT, 1000), resume{}, cfg, 51000);
  EXPECT_EQ(after.next->to, step::APPROVAL_TIMEOUT);
  EXPECT_EQ(hint_for(phase_of(step::APPROVAL_TIMEOUT), step::APPROVAL_TIMEOUT), hint::REAPPLY_ALLOWED);
}

TEST(Decide, CheckPipelineOutcomes) {
  auto cfg = test_settings();
  auto r = ok_reply(call_kind::read_pipeline);
  r.sha = "s";
  r.pipeline_sha = "s";
  r.pipeline_status = "success";
  EXPECT_EQ(decide(at(step::CREATE_MR_OPENED), reply_of(r), cfg, 0).next->to, step::CREATE_SUCCEEDED);
  r.pipeline_status = "failed";
  auto failed = decide(at(step::CREATE_MR_OPENED), reply_of(r), cfg, 0);
  EXPECT_EQ(failed.next->to, step::CREATE_PIPELINE_FAILED);
  EXPECT_EQ(hint_for(phase_of(failed.next->to), failed.next->to), hint::CONTACT_MAINTAINERS);
  // A pipeline of an older SHA does not count.
  r.pipeline_status = "success";
  r.pipeline_sha = "old";
  EXPECT_FALSE(decide(at(step::CREATE_MR_OPENED), reply_of(r), cfg, 0).next);
  // Running: short polls, then long ones, then timeout -> pending (phase kept, KEEP_WAITING).
  r.pipeline_sha = "s";
  r.pipeline_status = "running";
  auto st = at(step::CREATE_MR_OPENED);
  auto d = decide(st, reply_of(r), cfg, 10);
  EXPECT_EQ(d.effects[0].delay_ms, 100);
  EXPECT_TRUE(d.count_poll);
  st.polls = 5;
  EXPECT_EQ(decide(st, reply_of(r), cfg, 10).effects[0].delay_ms, 1000);
  auto timeout = decide(st, reply_of(r), cfg, 10000);
  EXPECT_EQ(timeout.next->to, step::CREATE_PIPELINE_PENDING);
  EXPECT_EQ(phase_of(step::CREATE_PIPELINE_PENDING), phase_of(step::CREATE_MR_OPENED));
  EXPECT_EQ(hint_for(phase_of(timeout.next->to), timeout.next->to), hint::KEEP_WAITING);
  // A pending pipeline that finally passes continues.
  r.pipeline_status = "success";
  EXPECT_EQ(decide(at(step::CREATE_PIPELINE_PENDING), reply_of(r), cfg, 50000).next->to, step::CREATE_SUCCEEDED);
}

TEST(Decide, BotApprovalOutcomes) {
  auto cfg = test_settings();
  // The same outcomes whether the approvals ran from HANDLE_STARTED (legacy order, an operator's
  // re-trigger) or straight from CREATE_SUCCEEDED (the new order).
  for (auto from : {step::HANDLE_STARTED, step::CREATE_SUCCEEDED}) {
    auto r = ok_reply(call_kind::approve_bots);
    EXPECT_EQ(decide(at(from), reply_of(r), cfg, 0).next->to, step::HANDLE_APPROVED) << to_string(from);
    r.already_merged = true;
    EXPECT_EQ(decide(at(from), reply_of(r), cfg, 0).next->to, step::HANDLE_ALREADY_MERGED);
    r.already_merged = false;
    r.closed = true;
    EXPECT_EQ(decide(at(from), reply_of(r), cfg, 0).next->to, step::HANDLE_MR_CLOSED);
    r.closed = false;
    r.outcome = status::refused;
    r.http_status = 401;
    EXPECT_EQ(decide(at(from), reply_of(r), cfg, 0).next->to, step::HANDLE_APPROVAL_FAILED);
    r.outcome = status::overloaded;
    EXPECT_EQ(decide(at(from), reply_of(r), cfg, 0).next->to, step::HANDLE_OVERLOADED);
    r.outcome = status::retryable;
    auto wait = decide(at(from), reply_of(r), cfg, 0);
    EXPECT_FALSE(wait.next.has_value()) << "a retry waits in " << to_string(from);
    EXPECT_TRUE(has_effect(wait, effect::kind::timer));
    auto gave_up = decide(at(from), reply_of(r), cfg, 100000000);
    ASSERT_TRUE(gave_up.next);
    EXPECT_EQ(gave_up.next->to, step::HANDLE_ERROR);
    EXPECT_TRUE(is_allowed(from, gave_up.next->to)) << to_string(from);
  }
}

// The read that ended the pipeline wait goes to the approvals, the approvals' read to the first
// merge attempt; nothing else hands a read on, and only those two calls carry one.
TEST(Decide, AnMrReadIsHandedToTheApprovalsAndTheFirstMergeAttemptOnly) {
  auto cfg = test_settings();
  auto passed = pipeline_passed();
  passed.base_sha = "base";
  passed.target_branch = "main";
  passed.read_at_ms = 1234;
  auto d = decide(at(step::CREATE_MR_OPENED), reply_of(passed), cfg, 0);
  ASSERT_TRUE(d.keep_read);
  EXPECT_EQ(d.keep_read->sha, "s");
  EXPECT_EQ(d.keep_read->read_at_ms, 1234);
  EXPECT_EQ(d.keep_read->base_sha, "base");
  EXPECT_EQ(d.keep_read->target_branch, "main");
  // A reply without a read time carries no read; a running pipeline's read is not handed on.
  auto unstamped = passed;
  unstamped.read_at_ms = 0;
  EXPECT_FALSE(decide(at(step::CREATE_MR_OPENED), reply_of(unstamped), cfg, 0).keep_read);
  auto running = passed;
  running.pipeline_status = "running";
  EXPECT_FALSE(decide(at(step::CREATE_MR_OPENED), reply_of(running), cfg, 0).keep_read);
  auto merged = passed;
  merged.mr_state = "merged";
  EXPECT_FALSE(decide(at(step::CREATE_MR_OPENED), reply_of(merged), cfg, 0).keep_read);

  auto st = at(step::CREATE_SUCCEEDED);  // the step the read moved to: the approvals run from it
  st.last_read = *d.keep_read;
  auto approve = decide(st, resume{}, cfg, 0);
  ASSERT_TRUE(has_effect(approve, effect::kind::call, call_kind::approve_bots));
  EXPECT_EQ(approve.effects[0].call.last_read.sha, "s");
  auto approved = ok_reply(call_kind::approve_bots);
  approved.mr_state = "opened";
  approved.sha = "s2";
  approved.read_at_ms = 2000;
  auto after = decide(st, reply_of(approved), cfg, 0);
  ASSERT_TRUE(after.keep_read);
  EXPECT_EQ(after.keep_read->sha, "s2");
  EXPECT_EQ(after.sha_seen.value_or(""), "s2") << "the head the bots approved";
  approved.closed = true;
  EXPECT_FALSE(decide(st, reply_of(approved), cfg, 0).keep_read);

  for (auto s : {step::HANDLE_APPROVED, step::HANDLE_MERGING, step::HANDLE_PIPELINE_PENDING}) {
    auto m = at(s);
    m.last_read = *after.keep_read;
    auto merge = decide(m, resume{}, cfg, 0);
    ASSERT_TRUE(has_effect(merge, effect::kind::call, call_kind::try_merge)) << to_string(s);
    EXPECT_EQ(merge.effects[0].call.last_read.known(), s == step::HANDLE_APPROVED) << to_string(s);
  }
  auto merge_reply = ok_reply(call_kind::try_merge);
  merge_reply.merge = merge_result::not_mergeable_yet;
  merge_reply.read_at_ms = 3000;
  EXPECT_FALSE(decide(at(step::HANDLE_APPROVED), reply_of(merge_reply), cfg, 0).keep_read);
  // Other calls never carry one.
  auto pipeline_wait = at(step::CREATE_MR_OPENED);
  pipeline_wait.last_read = *d.keep_read;
  auto poll = decide(pipeline_wait, resume{}, cfg, 0);
  ASSERT_TRUE(has_effect(poll, effect::kind::call, call_kind::read_pipeline));
  EXPECT_FALSE(poll.effects[0].call.last_read.known());
}

TEST(Decide, MergeRebaseLoop) {
  auto cfg = test_settings();
  auto r = ok_reply(call_kind::try_merge);
  r.merge = merge_result::merged;
  EXPECT_EQ(decide(at(step::HANDLE_APPROVED), reply_of(r), cfg, 0).next->to, step::HANDLE_MERGED);

  r.merge = merge_result::not_mergeable_yet;  // 405 while GitLab computes mergeability: poll
  auto wait = decide(at(step::HANDLE_APPROVED), reply_of(r), cfg, 0);
  EXPECT_EQ(wait.next->to, step::HANDLE_MERGING);
  EXPECT_TRUE(has_effect(wait, effect::kind::timer));
  auto poll = decide(at(step::HANDLE_MERGING), reply_of(r), cfg, 0);
  EXPECT_FALSE(poll.next);
  EXPECT_EQ(decide(at(step::HANDLE_MERGING), reply_of(r), cfg, 10000).next->to, step::HANDLE_PIPELINE_PENDING);

  r.merge = merge_result::needs_rebase;
  auto rebase = decide(at(step::HANDLE_MERGING), reply_of(r), cfg, 0);
  EXPECT_EQ(rebase.next->to, step::HANDLE_REBASING);
  EXPECT_TRUE(has_effect(rebase, effect::kind::call, call_kind::rebase));
  EXPECT_TRUE(rebase.count_merge_attempt);
  auto exhausted = at(step::HANDLE_MERGING);
  exhausted.merge_attempts = 2;
  EXPECT_EQ(decide(exhausted, reply_of(r), cfg, 0).next->to, step::HANDLE_MERGE_FAILED);

  auto rr = ok_reply(call_kind::read_rebase);
  rr.rebase_in_progress = true;
  EXPECT_FALSE(decide(at(step::HANDLE_REBASING), reply_of(rr), cfg, 0).next);
  rr.rebase_in_progress = false;
  rr.merge_error = "Rebase failed. Please rebase locally";
  EXPECT_EQ(decide(at(step::HANDLE_REBASING), reply_of(rr), cfg, 0).next->to, step::HANDLE_REBASE_CONFLICT);
  rr.merge_error.clear();
  rr.sha = "sha2";
  auto rebased = decide(at(step::HANDLE_REBASING), reply_of(rr), cfg, 0);
  EXPECT_EQ(rebased.next->to, step::HANDLE_MERGING);
  EXPECT_EQ(rebased.sha_seen, "sha2");

  r.merge = merge_result::pipeline_failed;
  EXPECT_EQ(decide(at(step::HANDLE_MERGING), reply_of(r), cfg, 0).next->to, step::HANDLE_PIPELINE_FAILED);
  r.merge = merge_result::already_merged;
  EXPECT_EQ(decide(at(step::HANDLE_MERGING), reply_of(r), cfg, 0).next->to, step::HANDLE_ALREADY_MERGED);
}

// A file that moved under the change ends it CONTENT_CONFLICT wherever it is seen (the commit
// refused by GitLab, or the check before a merge), never retried, with its own hint; any other
// refusal of the commit stays CREATE_GITLAB_REFUSED.
TEST(Decide, ContentConflictEndsTheChangeWithItsOwnHint) {
  auto cfg = test_settings();
  struct c {
    const char* name;
    step s;
    call_kind k;
    status outcome;
    merge_result merge;
    bool commit_conflict;
    step expected;
  } cases[] = {
      {"commit refused: stale base", step::CREATE_STARTED, call_kind::create_mr, status::refused, merge_result::none,
       true, step::CONTENT_CONFLICT},
      {"commit refused otherwise", step::CREATE_STARTED, call_kind::create_mr, status::refused, merge_result::none,
       false, step::CREATE_GITLAB_REFUSED},
      {"check before the first merge", step::HANDLE_APPROVED, call_kind::try_merge, status::ok,
       merge_result::content_conflict, false, step::CONTENT_CONFLICT},
      {"check before a later merge or a rebase", step::HANDLE_MERGING, call_kind::try_merge, status::ok,
       merge_result::content_conflict, false, step::CONTENT_CONFLICT},
      {"check after the poll budget", step::HANDLE_PIPELINE_PENDING, call_kind::try_merge, status::ok,
       merge_result::content_conflict, false, step::CONTENT_CONFLICT},
  };
  for (const auto& tc : cases) {
    auto r = ok_reply(tc.k);
    r.outcome = tc.outcome;
    r.merge = tc.merge;
    r.content_conflict = tc.commit_conflict;
    r.error = "You are attempting to update a file that has changed since you started editing it.";
    auto d = decide(at(tc.s), reply_of(r), cfg, 0);
    ASSERT_TRUE(d.next) << tc.name;
    EXPECT_EQ(d.next->to, tc.expected) << tc.name;
    EXPECT_EQ(d.next->last_error, r.error) << tc.name;
    EXPECT_TRUE(has_effect(d, effect::kind::stop)) << tc.name;
    EXPECT_FALSE(has_effect(d, effect::kind::call)) << tc.name;
  }
  EXPECT_EQ(hint_for(phase_of(step::CONTENT_CONFLICT), step::CONTENT_CONFLICT), hint::REBASE_AND_RESUBMIT);
  EXPECT_EQ(describe(hint::REBASE_AND_RESUBMIT),
            "the file changed since your change was based on it: rebase your change and submit again");
  // Retrying would base the change on the newer version and commit over it: only ending it is offered.
  for (auto to : allowed_targets(step::CONTENT_CONFLICT, actor_kind::operator_only)) {
    EXPECT_TRUE(to == step::CLOSE_SUCCEEDED || to == step::CANCELLED || to == step::FORCED_FAILED ||
                to == step::HANDLE_ALREADY_MERGED)
        << to_string(to);
  }
  EXPECT_TRUE(is_allowed(step::CONTENT_CONFLICT, step::CANCELLED, actor_kind::requester));
}

TEST(Decide, OverloadBecomesAnExplicitFailureState) {
  auto cfg = test_settings();
  struct c {
    step s;
    call_kind k;
    step expected;
  } cases[] = {
      {step::APPROVAL_SENDING, call_kind::submit_approval, step::CREATE_OVERLOADED},
      {step::CREATE_STARTED, call_kind::create_mr, step::CREATE_OVERLOADED},
      {step::CREATE_MR_OPENED, call_kind::read_pipeline, step::CREATE_OVERLOADED},
      {step::HANDLE_STARTED, call_kind::approve_bots, step::HANDLE_OVERLOADED},
      {step::HANDLE_MERGING, call_kind::try_merge, step::HANDLE_OVERLOADED},
      {step::HANDLE_REBASING, call_kind::read_rebase, step::HANDLE_OVERLOADED},
  };
  for (const auto& tc : cases) {
    auto r = ok_reply(tc.k);
    r.outcome = status::overloaded;
    auto d = decide(at(tc.s), reply_of(r), cfg, 0);
    ASSERT_TRUE(d.next) << to_string(tc.s);
    EXPECT_EQ(d.next->to, tc.expected);
    EXPECT_TRUE(has_effect(d, effect::kind::stop));
  }
}

TEST(PollSchedule, TiersAndTimeout) {
  poll_schedule p{100, 2, 1000, 5000};
  EXPECT_EQ(p.next_delay(0, 0), 100);
  EXPECT_EQ(p.next_delay(1, 100), 100);
  EXPECT_EQ(p.next_delay(2, 200), 1000);
  EXPECT_EQ(p.next_delay(9, 4500), 500);  // never overshoots the budget
  EXPECT_FALSE(p.next_delay(9, 5000).has_value());
}

TEST(PollSchedule, TheShortTierRampsUpFromTheFirstInterval) {
  poll_schedule p{2000, 6, 15000, 3600000, 250};
  EXPECT_EQ(p.next_delay(0, 0), 250);
  EXPECT_EQ(p.next_delay(1, 250), 500);
  EXPECT_EQ(p.next_delay(2, 750), 1000);
  EXPECT_EQ(p.next_delay(3, 1750), 2000);
  EXPECT_EQ(p.next_delay(5, 5750), 2000);    // capped at the short interval
  EXPECT_EQ(p.next_delay(6, 7750), 15000);   // the long tier has no ramp
  EXPECT_EQ(p.next_delay(5, 3599900), 100);  // the budget still caps the ramp
  poll_schedule far{2000, 100, 15000, 3600000, 1};
  EXPECT_EQ(far.next_delay(99, 0), 2000);  // no overflow however many polls
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  poll_schedule wide{huge - 1, 100, huge, huge, huge / 3};
  EXPECT_EQ(wide.next_delay(1, 0), huge / 3 * 2);
  EXPECT_EQ(wide.next_delay(99, 0), huge - 1);  // capped at the short interval, not wrapped
}

TEST(Decide, APipelineWaitStartsWithTheRampAndDoubles) {
  auto cfg = test_settings();
  cfg.polls.first_interval_ms = 5;
  auto opened = ok_reply(call_kind::create_mr);
  opened.mr_iid = 7;
  auto d = decide(at(step::CREATE_STARTED), reply_of(opened), cfg, 0);
  ASSERT_TRUE(d.next);
  EXPECT_EQ(d.next->to, step::CREATE_MR_OPENED);
  ASSERT_TRUE(has_effect(d, effect::kind::timer));
  EXPECT_EQ(d.effects[0].delay_ms, 5) << "the first read of the pipeline comes after the first interval";
  auto running = ok_reply(call_kind::read_pipeline);
  running.sha = running.pipeline_sha = "s";
  running.pipeline_status = "running";
  auto st = at(step::CREATE_MR_OPENED);
  st.polls = 2;
  EXPECT_EQ(decide(st, reply_of(running), cfg, 10).effects[0].delay_ms, 20);
}

TEST(PollSchedule, NoRampWhenTheFirstIntervalIsOffOrNotShorter) {
  for (std::int64_t first : {std::int64_t{0}, std::int64_t{2000}, std::int64_t{5000}}) {
    poll_schedule p{2000, 3, 15000, 3600000, first};
    EXPECT_EQ(p.next_delay(0, 0), 2000) << first;
    EXPECT_EQ(p.next_delay(2, 4000), 2000) << first;
  }
}
