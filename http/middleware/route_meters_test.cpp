#include "http/middleware/route_meters.hpp"

#include <gtest/gtest.h>

#include <string>

using changeflow::http::middleware::route_meters;
using changeflow::metrics::registry;

namespace {
bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}
}  // namespace

TEST(RouteMeters, CountEachRequestUnderTheRoutesLabelsAsTheRegistrysGeneralPathDoes) {
  registry r;
  route_meters m(r, "/api/v1/changes/{id}", "GET", false);
  m.received();
  m.received();
  m.replied(200, 0.001, 0.002);
  m.replied(200, 0.003, 0.004);
  m.replied(404, 0.001, 0.001);
  EXPECT_EQ(r.counter_value("changeflow_http_requests_received_total",
                            {{"route", "/api/v1/changes/{id}"}, {"method", "GET"}}),
            2);
  auto text = r.serialize();
  EXPECT_TRUE(has_line(text,
                       "changeflow_http_request_duration_seconds_count{method=\"GET\",route=\"/api/v1/"
                       "changes/{id}\",status=\"200\"} 2"))
      << text;
  EXPECT_TRUE(has_line(text,
                       "changeflow_http_request_duration_seconds_count{method=\"GET\",route=\"/api/v1/"
                       "changes/{id}\",status=\"404\"} 1"))
      << text;
  // Not a callback route: no commit histogram.
  EXPECT_EQ(text.find("changeflow_callback_commit_seconds"), std::string::npos);

  // The same series as an emission through the general path: one family, one series.
  r.inc("changeflow_http_requests_received_total", "x", {{"route", "/api/v1/changes/{id}"}, {"method", "GET"}});
  EXPECT_EQ(r.counter_value("changeflow_http_requests_received_total",
                            {{"route", "/api/v1/changes/{id}"}, {"method", "GET"}}),
            3);
}

TEST(RouteMeters, ACallbackRouteAlsoRecordsArrivalToReplyByStatus) {
  registry r;
  route_meters m(r, "/api/v1/callbacks/deploy", "POST", true);
  m.replied(200, 0.001, 0.004);
  m.replied(200, 0.001, 0.004);
  auto text = r.serialize();
  EXPECT_TRUE(has_line(text,
                       "changeflow_callback_commit_seconds_count{route=\"/api/v1/callbacks/deploy\","
                       "status=\"200\"} 2"))
      << text;
  // Its own buckets (finer than the default latency buckets): 3 ms is a bound there.
  EXPECT_TRUE(has_line(text,
                       "changeflow_callback_commit_seconds_bucket{route=\"/api/v1/callbacks/deploy\","
                       "status=\"200\",le=\"0.003\"} 0"))
      << text;
  EXPECT_TRUE(has_line(text,
                       "changeflow_callback_commit_seconds_bucket{route=\"/api/v1/callbacks/deploy\","
                       "status=\"200\",le=\"0.005\"} 2"))
      << text;
}

TEST(RouteMeters, AStatusOutsideTheTableIsStillRecorded) {
  registry r;
  route_meters m(r, "/x", "GET", false);
  m.replied(799, 0.001, 0.001);
  EXPECT_TRUE(has_line(r.serialize(),
                       "changeflow_http_request_duration_seconds_count{method=\"GET\",route=\"/x\",status=\"799\"} 1"));
}

TEST(RouteMeters, TheRegistrysFaultHookStopsEmissionsThroughResolvedHandles) {
  registry r;
  route_meters m(r, "/x", "GET", false);
  m.received();  // resolved before the fault
  r.set_fault_injection(true);
  EXPECT_NO_THROW(m.received());
  EXPECT_NO_THROW(m.replied(200, 0.001, 0.001));
  EXPECT_EQ(r.counter_value("changeflow_http_requests_received_total", {{"route", "/x"}, {"method", "GET"}}), 1);
  r.set_fault_injection(false);
  m.received();
  EXPECT_EQ(r.counter_value("changeflow_http_requests_received_total", {{"route", "/x"}, {"method", "GET"}}), 2);
}
