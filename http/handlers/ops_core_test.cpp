// What the ops API shows an operator about actions: the console's buttons and the ops policy.

#include "http/handlers/ops.hpp"
#include "http/route_table.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using workflow::step;

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

TEST(OpsCore, OpsReadsAndActionsHaveSeparateBuckets) {
  auto read = http::policy_for(http::routes::ops_overview);
  auto act = http::policy_for(http::routes::ops_retrigger);
  EXPECT_EQ(read.bucket, "ops_read");
  EXPECT_EQ(read.limit_key, "rate_limit.ops_read");
  EXPECT_EQ(act.bucket, "ops");
  EXPECT_EQ(act.limit_key, "rate_limit.ops");
  EXPECT_EQ(read.required_rules, act.required_rules);
  EXPECT_TRUE(read.requires_identity);
}
