// The in-process memory of callback deliveries: copies in flight and copies of settled deliveries
// are answered without the database; the memory is bounded.

#include "service/callback_intake.hpp"

#include <gtest/gtest.h>

using changeflow::service::delivery_claims;

TEST(DeliveryClaims, ACopyInFlightOrOfASettledDeliveryIsRefusedAndTheMemoryIsBounded) {
  delivery_claims claims;
  {
    delivery_claims::scoped first(claims, "d-1");
    ASSERT_TRUE(first.held());
    delivery_claims::scoped copy(claims, "d-1");
    EXPECT_FALSE(copy.held()) << "a copy while the first is applied";
  }
  EXPECT_TRUE(delivery_claims::scoped(claims, "d-1").held()) << "released and never settled: a redelivery applies";

  claims.settled("d-1");
  EXPECT_TRUE(claims.is_settled("d-1"));
  EXPECT_FALSE(delivery_claims::scoped(claims, "d-1").held()) << "settled here: a copy is a duplicate";
  EXPECT_FALSE(claims.is_settled("d-2"));

  for (std::size_t i = 0; i < delivery_claims::remembered; ++i) claims.settled("later-" + std::to_string(i));
  EXPECT_FALSE(claims.is_settled("d-1")) << "the oldest is forgotten once the memory is full";
  EXPECT_TRUE(claims.is_settled("later-0"));
  EXPECT_TRUE(delivery_claims::scoped(claims, "d-1").held()) << "a forgotten id goes to the ledger again";
}
