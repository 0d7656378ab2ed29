#include "service/status_read.hpp"

#include "workflow/status.hpp"
#include "workflow/transitions.hpp"

#include <gtest/gtest.h>

using namespace changeflow;

TEST(StatusReadCache, OnlyEndedRowsNoOneCanMove) {
  EXPECT_TRUE(service::immutable_step(workflow::step::CANCELLED));
  EXPECT_TRUE(service::immutable_step(workflow::step::CLOSE_SUCCEEDED));
  EXPECT_TRUE(service::immutable_step(workflow::step::APPROVAL_REJECTED));
  // VALIDATED has no edge, but a revert links it (reverted_by, version + 1).
  EXPECT_FALSE(service::immutable_step(workflow::step::CALLED_BACK));
  EXPECT_FALSE(service::immutable_step(workflow::step::APPROVAL_SENT));
  for (auto s : workflow::all_steps) {
    if (!service::immutable_step(s)) continue;
    SCOPED_TRACE(std::string(workflow::to_string(s)));
    EXPECT_TRUE(workflow::is_terminal(workflow::phase_of(s)));
    EXPECT_TRUE(workflow::allowed_targets(s, workflow::actor_kind::operator_only).empty());
    EXPECT_NE(workflow::phase_of(s), workflow::phase::VALIDATED);
  }
}
