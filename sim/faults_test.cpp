#include "sim/faults.hpp"

#include <gtest/gtest.h>

using namespace changeflow::sim;
using nlohmann::json;

TEST(Faults, RejectsInvalidRules) {
  for (const json& bad : {json("x"), json{{"kind", "nope"}}, json{{"kind", "status"}, {"count", 0}},
                          json{{"kind", "approval_callback"}, {"mode", "sometimes"}},
                          json{{"kind", "status"}, {"status", "five hundred"}}}) {
    std::string error;
    EXPECT_FALSE(parse_fault(bad, error)) << bad.dump();
    EXPECT_FALSE(error.empty());
  }
}

TEST(Faults, MatchesEndpointSubjectAndUserAndCountsDown) {
  std::string error;
  fault_set set;
  set.add(*parse_fault({{"kind", "status"}, {"endpoint", "merge"}, {"match", "op-1"}, {"count", 2}}, error));
  set.add(*parse_fault({{"kind", "approve_not_allowed"}, {"user_id", 102}}, error));

  EXPECT_FALSE(set.take("status", "approve", "title op-1"));  // other endpoint
  EXPECT_FALSE(set.take("status", "merge", "title op-2"));    // other subject
  EXPECT_TRUE(set.take("status", "merge", "title op-1"));
  EXPECT_TRUE(set.take("status", "merge", "title op-1"));
  EXPECT_FALSE(set.take("status", "merge", "title op-1"));  // used up

  EXPECT_FALSE(set.take("approve_not_allowed", "approve", "any", 101));
  EXPECT_TRUE(set.take("approve_not_allowed", "approve", "any", 102));
  EXPECT_TRUE(set.take("approve_not_allowed", "approve", "any", 102));  // unlimited
  EXPECT_EQ(set.fired().at("status"), 2u);
}
