#include "workflow/revert_rule.hpp"

#include <gtest/gtest.h>

using namespace changeflow::workflow;

// Every phase a revert can be in, with and without a merge on its timeline: only an ended revert
// that never merged lets the original be reverted again.
TEST(RevertRule, EarlierRevertByPhase) {
  for (auto p : all_phases) {
    for (bool merged : {false, true}) {
      auto e = classify_earlier_revert(p, merged);
      if (!is_reappliable(p)) {
        EXPECT_EQ(e, earlier_revert::in_flight) << to_string(p);
      } else if (p == phase::VALIDATED || merged) {
        EXPECT_EQ(e, earlier_revert::in_effect) << to_string(p) << " merged=" << merged;
      } else {
        EXPECT_EQ(e, earlier_revert::without_effect) << to_string(p);
      }
    }
  }
  // The cases users meet, spelled out.
  EXPECT_EQ(classify_earlier_revert(phase::CANCELLED, false), earlier_revert::without_effect);
  EXPECT_EQ(classify_earlier_revert(phase::REJECTED, false), earlier_revert::without_effect);
  EXPECT_EQ(classify_earlier_revert(phase::CLOSED, true), earlier_revert::in_effect);
  EXPECT_EQ(classify_earlier_revert(phase::CREATE_FAILED, false), earlier_revert::in_flight);
  EXPECT_EQ(classify_earlier_revert(phase::MERGED, true), earlier_revert::in_flight);
}

TEST(RevertRule, OnlyAValidatedChangeWithoutALiveRevertMayBeReverted) {
  for (auto p : all_phases) {
    auto v = may_revert(p, std::nullopt);
    EXPECT_EQ(v, p == phase::VALIDATED ? revert_verdict::allowed : revert_verdict::not_validated) << to_string(p);
  }
  EXPECT_EQ(may_revert(phase::VALIDATED, earlier_revert::in_flight), revert_verdict::already_reverted);
  EXPECT_EQ(may_revert(phase::VALIDATED, earlier_revert::in_effect), revert_verdict::already_reverted);
  EXPECT_EQ(may_revert(phase::VALIDATED, earlier_revert::without_effect), revert_verdict::allowed);
  // Not validated wins over an earlier revert: the message must name the actual obstacle.
  EXPECT_EQ(may_revert(phase::MERGED, earlier_revert::in_flight), revert_verdict::not_validated);
}
