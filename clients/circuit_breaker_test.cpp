#include "clients/circuit_breaker.hpp"

#include <gtest/gtest.h>

using namespace changeflow::clients;
using namespace std::chrono_literals;

namespace {
const breaker_settings three_failures{3, 1000ms};
}

TEST(CircuitBreaker, OpensAfterConsecutiveFailuresOnly) {
  circuit_breaker b("gitlab");
  auto t = circuit_breaker::clock::now();
  b.record_failure(three_failures, t);
  b.record_failure(three_failures, t);
  b.record_success();  // a success in between resets the count
  b.record_failure(three_failures, t);
  b.record_failure(three_failures, t);
  EXPECT_EQ(b.state(), breaker_state::closed);
  EXPECT_TRUE(b.allow(three_failures, t));
  b.record_failure(three_failures, t);
  EXPECT_EQ(b.state(), breaker_state::open);
  EXPECT_EQ(b.state_value(), 1);
  EXPECT_FALSE(b.allow(three_failures, t + 999ms));
}

TEST(CircuitBreaker, HalfOpensAfterCooldownWithOneTrial) {
  circuit_breaker b("approval");
  auto t = circuit_breaker::clock::now();
  for (int i = 0; i < 3; ++i) b.record_failure(three_failures, t);
  ASSERT_EQ(b.state(), breaker_state::open);

  EXPECT_TRUE(b.allow(three_failures, t + 1000ms));  // the trial
  EXPECT_EQ(b.state(), breaker_state::half_open);
  EXPECT_FALSE(b.allow(three_failures, t + 1001ms));  // others wait for the trial's verdict
  b.record_failure(three_failures, t + 1002ms);       // trial failed: open again, new cool-down
  EXPECT_EQ(b.state(), breaker_state::open);
  EXPECT_FALSE(b.allow(three_failures, t + 1500ms));
  EXPECT_TRUE(b.allow(three_failures, t + 2002ms));
  b.record_success();
  EXPECT_EQ(b.state(), breaker_state::closed);
  EXPECT_TRUE(b.allow(three_failures, t + 2003ms));
  EXPECT_EQ(b.times_opened(), 2u);
}

TEST(CircuitBreaker, NonPositiveThresholdFallsBackToFive) {
  circuit_breaker b("permission");
  const breaker_settings broken{0, 1000ms};
  for (int i = 0; i < 4; ++i) b.record_failure(broken);
  EXPECT_EQ(b.state(), breaker_state::closed);
  b.record_failure(broken);
  EXPECT_EQ(b.state(), breaker_state::open);
}
