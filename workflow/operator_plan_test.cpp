// Which operator edge each ops action takes, from the transition table.

#include "workflow/operator_plan.hpp"
#include "workflow/transitions.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using workflow::step;

TEST(OperatorPlan, RetriggerFollowsTheOperatorEdgeOfTheStep) {
  EXPECT_EQ(workflow::retrigger_target(step::CREATE_PIPELINE_PENDING), step::CREATE_MR_OPENED);
  EXPECT_EQ(workflow::retrigger_target(step::HANDLE_ERROR), step::HANDLE_STARTED);
  EXPECT_EQ(workflow::retrigger_target(step::APPROVAL_SUBMIT_FAILED), step::APPROVAL_SENDING);
  EXPECT_EQ(workflow::retrigger_target(step::BATCH_FAILED), step::BATCH_WAITING);
  // Steps driven by the workflow itself, or final, have nothing to re-trigger.
  EXPECT_FALSE(workflow::retrigger_target(step::APPROVAL_SENT));
  EXPECT_FALSE(workflow::retrigger_target(step::CALLED_BACK));
  EXPECT_FALSE(workflow::retrigger_target(step::FORCED_FAILED));
}

TEST(OperatorPlan, EveryPlannedTargetIsAnAllowedOperatorEdge) {
  for (auto s : workflow::all_steps) {
    for (auto a : {workflow::ops_action::retrigger, workflow::ops_action::fail, workflow::ops_action::close,
                   workflow::ops_action::resend_approval}) {
      auto p = workflow::plan_action(a, s);
      if (p.target) {
        EXPECT_TRUE(workflow::is_allowed(s, *p.target, workflow::actor_kind::operator_only))
            << workflow::to_string(s) << " " << workflow::to_string(a);
      } else {
        EXPECT_FALSE(p.refusal.empty()) << workflow::to_string(s) << " " << workflow::to_string(a);
        EXPECT_NE(p.refusal.find(std::string(workflow::to_string(s))), std::string::npos) << p.refusal;
      }
    }
  }
}

TEST(OperatorPlan, FinalStatesRefuseFailAndClose) {
  EXPECT_FALSE(workflow::plan_action(workflow::ops_action::fail, step::CALLED_BACK).target);
  EXPECT_FALSE(workflow::plan_action(workflow::ops_action::close, step::CALLED_BACK).target);
  EXPECT_FALSE(workflow::plan_action(workflow::ops_action::close, step::HANDLE_MERGED).target);  // merged wins
  EXPECT_EQ(workflow::plan_action(workflow::ops_action::fail, step::HANDLE_MERGING).target, step::FORCED_FAILED);
  EXPECT_EQ(workflow::plan_action(workflow::ops_action::close, step::APPROVAL_SENT).target, step::CLOSE_SUCCEEDED);
  EXPECT_FALSE(workflow::plan_action(workflow::ops_action::resend_approval, step::APPROVAL_SENT).target);
  EXPECT_EQ(workflow::plan_action(workflow::ops_action::resend_approval, step::APPROVAL_SUBMIT_FAILED).target,
            step::APPROVAL_SENDING);
}
