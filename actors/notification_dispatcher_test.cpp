#include "actors/notification_dispatcher.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using namespace changeflow::actors;

TEST(NotificationRetry, DoublesFromTheBaseAndStopsAtTheCap) {
  struct retry_case {
    int failed;
    std::int64_t base, cap, expected;
  };
  const retry_case cases[] = {
      {1, 1000, 300000, 1000},   {2, 1000, 300000, 2000},       {3, 1000, 300000, 4000},
      {9, 1000, 300000, 256000}, {10, 1000, 300000, 300000},    {10000, 1000, 300000, 300000},
      {0, 1000, 300000, 1000},   {-5, 1000, 300000, 1000},      {3, 500, 700, 700},
      {1, 0, 300000, 1},         {40, 1, 1LL << 62, 1LL << 39}, {64, 3, (1LL << 62), 1LL << 62},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(retry_delay_ms(c.failed, c.base, c.cap), c.expected) << c.failed << " " << c.base << " " << c.cap;
  }
}

TEST(NotificationSignature, IsHmacSha256OfTimestampThenBody) {
  // Reference value from Python: hmac.new(b"0123456789abcdef", b"1700000000" + b'{"a":1}', sha256).
  EXPECT_EQ(notification_signature("0123456789abcdef", "1700000000", R"({"a":1})"),
            "sha256=acd4cc16ebec151f094bfbc5b26ca51eeb63414bf82f37fe1a320ff2058fa1f0");
  EXPECT_NE(notification_signature("0123456789abcdef", "1700000001", R"({"a":1})"),
            notification_signature("0123456789abcdef", "1700000000", R"({"a":1})"));
}

TEST(NotificationBody, CarriesIdsSequenceEventAndChange) {
  persistence::claimed_delivery d;
  d.delivery_id = "d-1";
  d.subscription_id = "s-1";
  d.kind = "change.phase_changed";
  d.operation_id = "op-1";
  d.sequence = 3;
  auto body = notification_body(d, {{"toPhase", "MERGED"}}, {{"phase", "VALIDATED"}});
  EXPECT_EQ(body["deliveryId"], "d-1");
  EXPECT_EQ(body["subscriptionId"], "s-1");
  EXPECT_EQ(body["kind"], "change.phase_changed");
  EXPECT_EQ(body["operationId"], "op-1");
  EXPECT_EQ(body["sequence"], 3);
  EXPECT_EQ(body["event"]["toPhase"], "MERGED");
  EXPECT_EQ(body["change"]["phase"], "VALIDATED");
}
