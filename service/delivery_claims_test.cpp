// The in-process memory of callback deliveries: copies in flight and copies of settled deliveries
// are answered without the database; the memory is bounded.

#include "service/callback_intake.hpp"

#include "metrics/registry.hpp"
#include "persistence/transition_committer.hpp"
#include "runtime/services.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <optional>

using changeflow::service::delivery_claims;
namespace persistence = changeflow::persistence;
namespace service = changeflow::service;

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

// A copy of an approval this process settled is answered where it arrives: no job on the database
// pool and nothing for the committer, so it costs no hand-off between threads. A delivery not yet
// settled is handed to the committer (its job stays queued here: the pool has no threads).
TEST(DeliveryClaims, ACopyOfASettledApprovalIsAnsweredWhereItArrives) {
  changeflow::metrics::registry metrics;
  persistence::db_pool pool{"db", 0, 100,
                            [] { return std::make_unique<persistence::db_context>(persistence::db_settings{}); }};
  persistence::transition_committer committer(pool, 32, 1, 100);
  changeflow::runtime::services svc;
  svc.metrics = &metrics;
  svc.transitions = &committer;
  auto claims = std::make_shared<delivery_claims>();

  service::approval_delivery copy;
  copy.delivery_id = "cb-1";
  copy.operation_id = "op-1";
  claims->settled("approval:cb-1:op-1");
  std::optional<service::approval_intake> answered;
  ASSERT_TRUE(service::take_approval_grouped(svc, copy, claims, [&](service::approval_intake r) { answered = r; }));
  ASSERT_TRUE(answered.has_value()) << "answered before take_approval_grouped returned";
  EXPECT_TRUE(answered->ok);
  EXPECT_EQ(answered->outcome, persistence::callback_outcome::DUPLICATE);
  EXPECT_EQ(pool.stats().queued, 0u);
  EXPECT_EQ(committer.stats().queued, 0u);
  EXPECT_EQ(metrics.counter_value("changeflow_callbacks_total", {{"kind", "approval"}, {"outcome", "DUPLICATE"}}), 1.0);

  // The same id for another operation is not that delivery: it goes to the committer.
  service::approval_delivery other = copy;
  other.operation_id = "op-2";
  std::optional<service::approval_intake> later;
  ASSERT_TRUE(service::take_approval_grouped(svc, other, claims, [&](service::approval_intake r) { later = r; }));
  EXPECT_FALSE(later.has_value()) << "a unit in the committer's queue, not answered yet";
  EXPECT_EQ(committer.stats().queued, 1u);
}
