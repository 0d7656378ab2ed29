#include "workflow/status.hpp"

#include <gtest/gtest.h>

#include <set>

using namespace changeflow::workflow;

TEST(Status, EveryStepRoundTripsByNameAndCode) {
  std::set<int> codes;
  for (auto s : all_steps) {
    EXPECT_EQ(parse_step(to_string(s)), s);
    EXPECT_EQ(step_from_code(code_of(s)), s);
    EXPECT_TRUE(codes.insert(code_of(s)).second) << "duplicate code " << code_of(s);
  }
  EXPECT_FALSE(step_from_code(99999).has_value());
  EXPECT_FALSE(parse_step("NOPE").has_value());
  for (auto p : all_phases) EXPECT_EQ(parse_phase(to_string(p)), p);
}

TEST(Status, CodesSitInTheirRanges) {
  for (auto s : all_steps) {
    auto name = std::string(to_string(s));
    int range = code_of(s) / 100;
    if (name.ends_with("_PENDING")) {
      EXPECT_EQ(range, 105) << name;
    } else if (name.starts_with("BATCH_")) {
      EXPECT_EQ(range, 106) << name;
    } else if (name.starts_with("HANDLE_")) {
      EXPECT_EQ(range, 101) << name;
    } else if (name.starts_with("CREATE_") || name.starts_with("APPROVAL_") || name == "CONTENT_CONFLICT") {
      EXPECT_EQ(range, 100) << name;
    } else if (name.starts_with("CLOSE_") || name == "FORCED_FAILED" || name == "CANCELLED") {
      EXPECT_EQ(range, 102) << name;
    } else {
      EXPECT_EQ(range, 103) << name;
    }
  }
}

// A target is free for its next change exactly when its current change ended: done, rejected,
// closed or cancelled. Failures awaiting an operator still hold it.
TEST(Status, ReappliableIsExactlyTheEndedPhases) {
  std::set<phase> reappliable;
  for (auto p : all_phases) {
    if (is_reappliable(p)) reappliable.insert(p);
  }
  EXPECT_EQ(reappliable, (std::set<phase>{phase::VALIDATED, phase::REJECTED, phase::CLOSED, phase::CANCELLED}));
  EXPECT_EQ(phase_of(step::CANCELLED), phase::CANCELLED);
  EXPECT_TRUE(is_terminal(phase::CANCELLED));
  EXPECT_FALSE(is_reappliable(phase_of(step::FORCED_FAILED)));
  EXPECT_FALSE(is_reappliable(phase_of(step::DEPLOY_FAILED)));
}

TEST(Status, AwaitingApprovalIncludesSending) {
  EXPECT_TRUE(is_awaiting_approval(phase::APPROVAL_SENDING));
  EXPECT_TRUE(is_awaiting_approval(phase::APPROVAL_SENT));
  EXPECT_FALSE(is_awaiting_approval(phase::MR_CREATING));
}

TEST(Status, HintsTable) {
  struct c {
    step s;
    hint h;
  } cases[] = {
      {step::CALLED_BACK, hint::DONE},
      {step::APPROVAL_REJECTED, hint::REAPPLY_ALLOWED},
      {step::APPROVAL_TIMEOUT, hint::REAPPLY_ALLOWED},
      {step::CANCELLED, hint::REAPPLY_ALLOWED},
      {step::DEPLOY_FAILED, hint::CONTACT_MAINTAINERS},
      {step::DEPLOY_TIMEOUT, hint::CONTACT_MAINTAINERS},
      {step::FORCED_FAILED, hint::CONTACT_MAINTAINERS},
      {step::HANDLE_MERGED, hint::KEEP_WAITING},
      {step::CREATE_PIPELINE_FAILED, hint::CONTACT_MAINTAINERS},
      {step::HANDLE_REBASE_CONFLICT, hint::CONTACT_MAINTAINERS},
      {step::HANDLE_APPROVAL_FAILED, hint::CONTACT_MAINTAINERS},
      {step::HANDLE_PIPELINE_PENDING, hint::KEEP_WAITING},
      {step::CREATE_PIPELINE_PENDING, hint::KEEP_WAITING},
      {step::HANDLE_OVERLOADED, hint::KEEP_WAITING},
      {step::HANDLE_MERGING, hint::KEEP_WAITING},
      {step::APPROVAL_SENT, hint::KEEP_WAITING},
      {step::CONTENT_CONFLICT, hint::REBASE_AND_RESUBMIT},
  };
  for (const auto& tc : cases) EXPECT_EQ(hint_for(phase_of(tc.s), tc.s), tc.h) << to_string(tc.s);
}

TEST(Status, DeterministicFailuresAreFailurePhases) {
  for (auto s : all_steps) {
    if (!is_deterministic_failure(s)) continue;
    auto p = phase_of(s);
    EXPECT_TRUE(p == phase::CREATE_FAILED || p == phase::HANDLE_FAILED) << to_string(s);
  }
}

TEST(Status, FlowNames) {
  EXPECT_EQ(parse_flow("approve_then_create"), flow::approve_then_create);
  EXPECT_EQ(parse_flow("create_then_approve"), flow::create_then_approve);
  EXPECT_FALSE(parse_flow("Approve_Then_Create").has_value());
}
