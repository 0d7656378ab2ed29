#include "workflow/transitions.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <set>

using namespace changeflow::workflow;

TEST(Transitions, NoWorkflowEdgeLeavesATerminalPhase) {
  for (const auto& r : transition_table()) {
    if (r.by != actor_kind::workflow) continue;
    EXPECT_FALSE(is_terminal(phase_of(r.from))) << to_string(r.from) << " -> " << to_string(r.to);
  }
}

TEST(Transitions, ValidatedIsFinalForEveryone) {
  for (auto s : all_steps) {
    if (phase_of(s) == phase::VALIDATED) {
      EXPECT_TRUE(allowed_targets(s, actor_kind::operator_only).empty());
    }
  }
}

TEST(Transitions, EveryNonTerminalStepHasAWorkflowExit) {
  for (auto s : all_steps) {
    if (is_terminal(phase_of(s))) continue;
    EXPECT_FALSE(allowed_targets(s, actor_kind::workflow).empty()) << to_string(s);
  }
}

TEST(Transitions, EveryStepIsReachableFromAnInitialStep) {
  std::set<step> seen;
  std::deque<step> queue;
  for (auto s : all_steps) {
    if (is_initial_step(s)) {
      seen.insert(s);
      queue.push_back(s);
    }
  }
  while (!queue.empty()) {
    auto s = queue.front();
    queue.pop_front();
    for (auto t : allowed_targets(s, actor_kind::operator_only)) {
      if (seen.insert(t).second) queue.push_back(t);
    }
  }
  for (auto s : all_steps) EXPECT_TRUE(seen.count(s)) << to_string(s) << " unreachable";
}

TEST(Transitions, MainPathsAreAllowed) {
  const std::vector<step> new_order = {step::APPROVAL_SENDING, step::APPROVAL_SENT,    step::APPROVAL_APPROVED,
                                       step::CREATE_STARTED,   step::CREATE_MR_OPENED, step::CREATE_SUCCEEDED,
                                       step::HANDLE_APPROVED,  step::HANDLE_MERGING,   step::HANDLE_REBASING,
                                       step::HANDLE_MERGING,   step::HANDLE_MERGED,    step::CALLED_BACK};
  const std::vector<step> legacy = {step::CREATE_STARTED,   step::CREATE_MR_OPENED,      step::CREATE_SUCCEEDED,
                                    step::APPROVAL_SENDING, step::APPROVAL_SENT,         step::APPROVAL_APPROVED,
                                    step::HANDLE_STARTED,   step::HANDLE_ALREADY_MERGED, step::CALLED_BACK};
  const std::vector<step> batch = {step::APPROVAL_SENDING, step::APPROVAL_APPROVED, step::BATCH_WAITING,
                                   step::BATCH_CLAIMED,    step::BATCH_WAITING,     step::BATCH_CLAIMED,
                                   step::BATCH_MERGED,     step::CALLED_BACK};
  for (const auto* path : {&new_order, &legacy, &batch}) {
    for (size_t i = 1; i < path->size(); ++i) {
      EXPECT_TRUE(is_allowed((*path)[i - 1], (*path)[i]))
          << to_string((*path)[i - 1]) << " -> " << to_string((*path)[i]);
    }
  }
}

TEST(Transitions, IllegalEdgesAreRefused) {
  struct c {
    step from, to;
  } refused[] = {
      {step::APPROVAL_REJECTED, step::APPROVAL_APPROVED},  // late APPROVED after REJECTED
      {step::CALLED_BACK, step::HANDLE_MERGED},
      {step::APPROVAL_SENT, step::HANDLE_MERGED},
      {step::HANDLE_MERGED, step::HANDLE_MERGING},
      {step::CREATE_PIPELINE_FAILED, step::CREATE_SUCCEEDED},
      {step::HANDLE_REBASE_CONFLICT, step::HANDLE_MERGED},
  };
  for (const auto& r : refused) {
    EXPECT_FALSE(is_allowed(r.from, r.to, actor_kind::operator_only)) << to_string(r.from) << " -> " << to_string(r.to);
  }
}

TEST(Transitions, OperatorOnlyEdgesAreRefusedToTheWorkflow) {
  EXPECT_FALSE(is_allowed(step::HANDLE_ERROR, step::HANDLE_STARTED, actor_kind::workflow));
  EXPECT_TRUE(is_allowed(step::HANDLE_ERROR, step::HANDLE_STARTED, actor_kind::operator_only));
  EXPECT_FALSE(is_allowed(step::HANDLE_MERGING, step::FORCED_FAILED, actor_kind::workflow));
  EXPECT_TRUE(is_allowed(step::HANDLE_MERGING, step::FORCED_FAILED, actor_kind::operator_only));
}

TEST(Transitions, EveryRuleRespectsPhaseRules) {
  // Table-driven over every row: an edge never enters an initial step from a terminal one except by
  // an operator, and no edge starts from VALIDATED.
  for (const auto& r : transition_table()) {
    EXPECT_NE(phase_of(r.from), phase::VALIDATED);
    if (is_terminal(phase_of(r.from))) {
      EXPECT_NE(r.by, actor_kind::workflow) << to_string(r.from) << " -> " << to_string(r.to);
    }
  }
}

// No dead ends: from every step whose change has not ended, some sequence of edges (anyone's) reaches
// a step that frees the target. Breaking it (e.g. dropping the close edge of FORCED_FAILED) fails here.
TEST(Transitions, EveryStepThatHasNotEndedCanFreeItsTarget) {
  for (auto start : all_steps) {
    if (is_reappliable(phase_of(start))) continue;
    std::set<step> seen{start};
    std::deque<step> queue{start};
    bool frees = false;
    while (!queue.empty() && !frees) {
      auto s = queue.front();
      queue.pop_front();
      for (auto t : allowed_targets(s, actor_kind::operator_only)) {
        if (is_reappliable(phase_of(t))) frees = true;
        if (seen.insert(t).second) queue.push_back(t);
      }
    }
    EXPECT_TRUE(frees) << to_string(start) << " can never free its target";
  }
}

// Every failure awaiting an operator has a direct operator way out that ends it (close, or confirm
// for a failed deploy) — not only a re-trigger that may fail again.
TEST(Transitions, EveryFailureCanBeEndedByAnOperatorInOneStep) {
  for (auto s : all_steps) {
    auto p = phase_of(s);
    if (p != phase::CREATE_FAILED && p != phase::HANDLE_FAILED) continue;
    bool ends = false;
    for (auto t : allowed_targets(s, actor_kind::operator_only)) ends = ends || is_reappliable(phase_of(t));
    EXPECT_TRUE(ends) << to_string(s);
  }
}

TEST(Transitions, RequesterMayCancelEverythingNotMergedExceptAClaimedBatchMember) {
  for (auto s : all_steps) {
    auto p = phase_of(s);
    bool expected = !is_reappliable(p) && p != phase::MERGED && s != step::DEPLOY_FAILED && s != step::BATCH_CLAIMED;
    EXPECT_EQ(is_allowed(s, step::CANCELLED, actor_kind::requester), expected) << to_string(s);
    EXPECT_FALSE(is_allowed(s, step::CANCELLED, actor_kind::workflow)) << to_string(s);
    // Nobody closes a claimed batch member (its MR is the shared batch MR); a requester takes no
    // operator edge.
    if (s == step::BATCH_CLAIMED) {
      EXPECT_FALSE(is_allowed(s, step::CLOSE_SUCCEEDED, actor_kind::operator_only));
    }
    EXPECT_FALSE(is_allowed(s, step::CLOSE_SUCCEEDED, actor_kind::requester)) << to_string(s);
  }
}

TEST(Transitions, FailedDeployIsAFailureOperatorsResolve) {
  for (auto merged : {step::HANDLE_MERGED, step::HANDLE_ALREADY_MERGED, step::BATCH_MERGED, step::DEPLOY_TIMEOUT}) {
    EXPECT_TRUE(is_allowed(merged, step::DEPLOY_FAILED, actor_kind::workflow)) << to_string(merged);
  }
  EXPECT_FALSE(is_allowed(step::DEPLOY_FAILED, step::CALLED_BACK, actor_kind::workflow));
  EXPECT_TRUE(is_allowed(step::DEPLOY_FAILED, step::CALLED_BACK, actor_kind::operator_only));
  EXPECT_TRUE(is_allowed(step::DEPLOY_FAILED, step::CLOSE_SUCCEEDED, actor_kind::operator_only));
  EXPECT_TRUE(is_allowed(step::FORCED_FAILED, step::CLOSE_SUCCEEDED, actor_kind::operator_only));
}
