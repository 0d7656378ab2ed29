// What the ops API shows an operator about actions: the console's buttons and the ops policy.

#include "http/handlers/ops.hpp"
#include "http/handlers/ops_body.hpp"
#include "http/route_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>

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
  // Fail and close are destructive; fail needs a reason; an unknown outcome is no deterministic failure.
  EXPECT_TRUE(a[0]["warning"].is_null());
  EXPECT_FALSE(a[0]["destructive"].get<bool>());
  EXPECT_TRUE(a[1]["destructive"].get<bool>());
  EXPECT_TRUE(a[1]["requiresReason"].get<bool>());
  EXPECT_TRUE(a[2]["destructive"].get<bool>());
  EXPECT_FALSE(a[2]["requiresReason"].get<bool>());
}

TEST(OpsCore, ARetriggerAfterADeterministicPipelineFailureIsWarned) {
  auto a = http::allowed_actions_json(step::CREATE_PIPELINE_FAILED);
  auto retrigger = std::find_if(a.begin(), a.end(), [](const auto& x) { return x["action"] == "retrigger"; });
  ASSERT_NE(retrigger, a.end()) << a.dump(2);
  ASSERT_TRUE((*retrigger)["warning"].is_string());
  EXPECT_NE((*retrigger)["warning"].get<std::string>().find("reuses its failed pipeline"), std::string::npos);
  // A transient failure is not warned: a re-trigger may well help.
  for (const auto& x : http::allowed_actions_json(step::CREATE_ERROR)) EXPECT_TRUE(x["warning"].is_null()) << x.dump();
}

TEST(OpsCore, OpsPolicyDemandsOpsRules) {
  auto p = http::policy_for(http::route_access::ops);
  EXPECT_EQ(p.bucket, "ops");
  EXPECT_EQ(p.limit, &config::rate_limit_settings::ops);
  EXPECT_EQ(p.required_rules, (std::vector<std::string>{"changeflow.ops", "changeflow.admin"}));
  EXPECT_TRUE(p.requires_identity);
}

TEST(OpsCore, OpsReadsAndActionsHaveSeparateBuckets) {
  auto read = http::policy_for(http::routes::ops_overview);
  auto act = http::policy_for(http::routes::ops_retrigger);
  EXPECT_EQ(read.bucket, "ops_read");
  EXPECT_EQ(read.limit, &config::rate_limit_settings::ops_read);
  EXPECT_EQ(act.bucket, "ops");
  EXPECT_EQ(act.limit, &config::rate_limit_settings::ops);
  EXPECT_EQ(read.required_rules, act.required_rules);
  EXPECT_TRUE(read.requires_identity);
}

TEST(OpsCore, ListFilterReadsOrderActiveAndRefusesWhatItDoesNotKnow) {
  std::string error;
  auto f = http::parse_ops_filter(nlohmann::json{{"order", "newest"}, {"active", "true"}, {"phase", "MERGED"}}, error);
  ASSERT_TRUE(f) << error;
  EXPECT_TRUE(f->newest_first);
  EXPECT_TRUE(f->only_nonterminal);
  EXPECT_EQ(f->phase, workflow::phase::MERGED);
  auto oldest = http::parse_ops_filter(nlohmann::json{{"order", "oldest"}}, error);
  ASSERT_TRUE(oldest) << error;
  EXPECT_FALSE(oldest->newest_first);
  EXPECT_FALSE(oldest->only_nonterminal);
  EXPECT_FALSE(http::parse_ops_filter(nlohmann::json{{"order", "sideways"}}, error));
  EXPECT_NE(error.find("'order'"), std::string::npos) << error;
  EXPECT_FALSE(http::parse_ops_filter(nlohmann::json{{"phase", "NOPE"}}, error));
}
