#include "metrics/registry.hpp"

#include <gtest/gtest.h>

using namespace changeflow::metrics;

TEST(Metrics, CountsAndSerializes) {
  registry r;
  r.inc("cf_test_total", "test", {{"outcome", "APPLIED"}});
  r.inc("cf_test_total", "test", {{"outcome", "APPLIED"}});
  EXPECT_EQ(r.counter_value("cf_test_total", {{"outcome", "APPLIED"}}), 2);
  auto text = r.serialize();
  EXPECT_NE(text.find("cf_test_total{outcome=\"APPLIED\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("process_resident_memory_bytes"), std::string::npos);
  EXPECT_NE(text.find("process_cpu_seconds_total"), std::string::npos);
}

TEST(Metrics, InvalidLabelsAreSkippedNotThrown) {
  registry r;
  r.inc("cf_skip_total", "test", {{"user", ""}});
  EXPECT_EQ(r.counter_value("cf_skip_total", {{"user", ""}}), 0);
  EXPECT_EQ(r.serialize().find("cf_skip_total{"), std::string::npos);
}

TEST(Metrics, LabelValuesTruncatedTo128) {
  auto n = normalize({{"k", std::string(500, 'x')}});
  ASSERT_TRUE(n);
  EXPECT_EQ(n->at("k").size(), 128u);
  auto ctl = normalize({{"k", "a\nb\x01"}});
  EXPECT_EQ(ctl->at("k"), "ab");
}

TEST(Metrics, FaultInjectionNeverEscapes) {
  registry r;
  r.set_fault_injection(true);
  EXPECT_NO_THROW(r.inc("cf_fault_total", "t"));
  EXPECT_NO_THROW(r.set("cf_fault", "t", {}, 1));
  EXPECT_NO_THROW(r.observe("cf_fault_seconds", "t", {}, 1));
  EXPECT_EQ(r.counter_value("cf_fault_total"), 0);
}

TEST(Metrics, CollectorsRunOnSerialize) {
  registry r;
  int calls = 0;
  r.on_collect([&](registry& reg) {
    ++calls;
    reg.set("cf_live_actors", "t", {{"phase", "MERGING"}}, 3);
  });
  auto text = r.serialize();
  EXPECT_EQ(calls, 1);
  EXPECT_NE(text.find("cf_live_actors{phase=\"MERGING\"} 3"), std::string::npos);
}

TEST(Metrics, HandlesEmitIntoTheSameSeriesAsTheGeneralPath) {
  registry r;
  auto c = r.counter("cf_handle_total", "t", {{"k", "v"}});
  ASSERT_TRUE(c);
  EXPECT_EQ(r.counter_value("cf_handle_total", {{"k", "v"}}), 0);  // registered at 0
  c.inc();
  r.inc("cf_handle_total", "t", {{"k", "v"}});
  c.inc(2);
  EXPECT_EQ(r.counter_value("cf_handle_total", {{"k", "v"}}), 4);
  auto h = r.histogram("cf_handle_seconds", "t", {{"k", "v"}});
  ASSERT_TRUE(h);
  h.observe(0.001);
  EXPECT_NE(r.serialize().find("cf_handle_seconds_count{k=\"v\"} 1"), std::string::npos);
}

TEST(Metrics, AHandleOfInvalidLabelsIsEmptyAndEmitsNothing) {
  registry r;
  auto c = r.counter("cf_bad_handle_total", "t", {{"user", ""}});
  EXPECT_FALSE(c);
  EXPECT_NO_THROW(c.inc());
  EXPECT_EQ(r.serialize().find("cf_bad_handle_total{"), std::string::npos);
}

TEST(Metrics, FaultInjectionAppliesToHandles) {
  registry r;
  auto c = r.counter("cf_fault_handle_total", "t");
  r.set_fault_injection(true);
  EXPECT_NO_THROW(c.inc());
  EXPECT_EQ(r.counter_value("cf_fault_handle_total"), 0);
  r.set_fault_injection(false);
  c.inc();
  EXPECT_EQ(r.counter_value("cf_fault_handle_total"), 1);
}
