// The pure core of the ops actions: which operator edge each action takes, from the transition table.

#include "http/handlers/ops.hpp"
#include "workflow/transitions.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using workflow::step;

TEST(OpsCore, RetriggerFollowsTheOperatorEdgeOfTheStep) {
  EXPECT_EQ(http::retrigger_target(step::CREATE_PIPELINE_PENDING), step::CREATE_MR_OPENED);
  EXPECT_EQ(http::retrigger_target(step::HANDLE_ERROR), step::HANDLE_STARTED);
  EXPECT_EQ(http::retrigger_target(step::APPROVAL_SUBMIT_FAILED), step::APPROVAL_SENDING);
  EXPECT_EQ(http::retrigger_target(step::BATCH_FAILED), step::BATCH_WAITING);
  // Steps driven by the workflow itself, or final, have nothing to re-trigger.
  EXPECT_FALSE(http::retrigger_target(step::APPROVAL_SENT));
  EXPECT_FALSE(http::retrigger_target(step::CALLED_BACK));
  EXPECT_FALSE(http::retrigger_target(step::FORCED_FAILED));
}

TEST(OpsCore, EveryPlannedTargetIsAnAllowedOperatorEdge) {
  for (auto s : workflow::all_steps) {
    for (auto a : {http::ops_action::retrigger, http::ops_action::fail, http::ops_action::close,
                   http::ops_action::resend_approval}) {
      auto p = http::plan_action(a, s);
      if (p.target) {
        EXPECT_TRUE(workflow::is_allowed(s, *p.target, workflow::actor_kind::operator_only))
            << workflow::to_string(s) << " " << http::to_string(a);
      } else {
        EXPECT_FALSE(p.refusal.empty()) << workflow::to_string(s) << " " << http::to_string(a);
        EXPECT_NE(p.refusal.find(std::string(workflow::to_string(s))), std::string::npos) << p.refusal;
      }
    }
  }
}

TEST(OpsCore, FinalStatesRefuseFailAndClose) {
  EXPECT_FALSE(http::plan_action(http::ops_action::fail, step::CALLED_BACK).target);
  EXPECT_FALSE(http::plan_action(http::ops_action::close, step::CALLED_BACK).target);
  EXPECT_FALSE(http::plan_action(http::ops_action::close, step::HANDLE_MERGED).target);  // merged wins
  EXPECT_EQ(http::plan_action(http::ops_action::fail, step::HANDLE_MERGING).target, step::FORCED_FAILED);
  EXPECT_EQ(http::plan_action(http::ops_action::close, step::APPROVAL_SENT).target, step::CLOSE_SUCCEEDED);
  EXPECT_FALSE(http::plan_action(http::ops_action::resend_approval, step::APPROVAL_SENT).target);
  EXPECT_EQ(http::plan_action(http::ops_action::resend_approval, step::APPROVAL_SUBMIT_FAILED).target,
            step::APPROVAL_SENDING);
}

TEST(OpsCore, AllowedActionsListsButtonsForTheConsole) {
  auto a = http::allowed_actions_json(step::CREATE_PIPELINE_PENDING);
  ASSERT_TRUE(a.is_array());
  std::vector<std::string> names;
  for (const auto& x : a) names.push_back(x["action"]);
  EXPECT_EQ(names, (std::vector<std::string>{"retrigger", "fail", "close"}));
  EXPECT_EQ(a[0]["target"], "CREATE_MR_OPENED");
  EXPECT_TRUE(http::allowed_actions_json(step::CALLED_BACK).empty());
}

TEST(OpsCore, OpsPolicyDemandsOpsRules) {
  auto p = http::policy_for(http::route_access::ops);
  EXPECT_EQ(p.bucket, "ops");
  EXPECT_EQ(p.limit_key, "rate_limit.ops");
  EXPECT_EQ(p.required_rules, (std::vector<std::string>{"changeflow.ops", "changeflow.admin"}));
  EXPECT_TRUE(p.requires_identity);
}
