#include "service/idempotency.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using namespace changeflow::service;
using nlohmann::json;

namespace {
const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
}

TEST(Idempotency, FingerprintIgnoresWhitespaceAndKeyOrder) {
  const std::string route = "/api/v1/changes";
  auto base = request_fingerprint("POST", route, R"({"a":1,"b":[1,2],"c":{"x":"y"}})");
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(request_fingerprint("POST", route, "{ \"c\" : {\"x\":\"y\"},\n \"b\":[1, 2], \"a\":1 }"), base);
  EXPECT_NE(request_fingerprint("POST", route, R"({"a":2,"b":[1,2],"c":{"x":"y"}})"), base);
  EXPECT_NE(request_fingerprint("POST", route, R"({"a":1,"b":[2,1],"c":{"x":"y"}})"), base) << "array order counts";
  EXPECT_NE(request_fingerprint("PUT", route, R"({"a":1,"b":[1,2],"c":{"x":"y"}})"), base);
  EXPECT_NE(request_fingerprint("POST", "/api/v1/other", R"({"a":1,"b":[1,2],"c":{"x":"y"}})"), base);
}

TEST(Idempotency, InvalidJsonHashesRawBytes) {
  auto a = request_fingerprint("POST", "/r", "{not json");
  EXPECT_EQ(a, request_fingerprint("POST", "/r", "{not json"));
  EXPECT_NE(a, request_fingerprint("POST", "/r", "{not  json")) << "raw bytes: whitespace counts";
  EXPECT_EQ(canonical_body("{not json"), "raw:{not json");
  EXPECT_EQ(canonical_body(" {\"b\":1, \"a\":2} "), "json:{\"a\":2,\"b\":1}");
  EXPECT_EQ(canonical_body(""), "raw:");
  std::string bad_utf8 = "{\"a\":\"\xff\"}";
  EXPECT_NO_THROW((void)request_fingerprint("POST", "/r", bad_utf8));
}

TEST(Idempotency, DecisionTableDriven) {
  const std::string fp = request_fingerprint("POST", "/r", "{}");
  const std::string other = request_fingerprint("POST", "/r", "{\"x\":1}");
  auto record = [&](idempotency_state s, std::string f, std::chrono::seconds ttl) {
    return idempotency_record{"op-1", std::move(f), s, 202, "{\"code\":\"ACCEPTED\"}", now + ttl};
  };
  using std::chrono::seconds;
  struct decision_case {
    const char* name;
    std::optional<idempotency_record> existing;
    idempotency_decision want;
  };
  const decision_case cases[] = {
      {"no record", std::nullopt, idempotency_decision::proceed_fresh},
      {"completed, same body", record(idempotency_state::completed, fp, seconds(60)),
       idempotency_decision::replay_stored_response},
      {"in flight, same body", record(idempotency_state::in_flight, fp, seconds(60)),
       idempotency_decision::in_flight_409},
      {"completed, changed body", record(idempotency_state::completed, other, seconds(60)),
       idempotency_decision::conflict_changed_body_422},
      {"in flight, changed body", record(idempotency_state::in_flight, other, seconds(60)),
       idempotency_decision::conflict_changed_body_422},
      {"expired record counts as absent", record(idempotency_state::completed, other, seconds(0)),
       idempotency_decision::proceed_fresh},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(decide(c.existing, fp, now), c.want) << c.name << ": got " << to_string(decide(c.existing, fp, now));
  }
}

TEST(Idempotency, StateRoundTripAndDurationFallbacks) {
  for (auto s : {idempotency_state::in_flight, idempotency_state::completed}) {
    EXPECT_EQ(parse_idempotency_state(to_string(s)), s);
  }
  EXPECT_FALSE(parse_idempotency_state("in_flight"));
  auto env = [](const std::string&) { return std::optional<std::string>(); };
  struct duration_case {
    json doc;
    std::int64_t want_ttl_s;
    std::int64_t want_in_flight_ms;
  };
  const duration_case cases[] = {
      {json::object(), 86400, 30000},
      {{{"idempotency.ttl_seconds", 60}, {"idempotency.in_flight_timeout_ms", 1500}}, 60, 1500},
      {{{"idempotency.ttl_seconds", 0}, {"idempotency.in_flight_timeout_ms", 0}}, 86400, 30000},
      {{{"idempotency.ttl_seconds", -1}, {"idempotency.in_flight_timeout_ms", -1}}, 86400, 30000},
      {{{"idempotency.ttl_seconds", nullptr}, {"idempotency.in_flight_timeout_ms", nullptr}}, 86400, 30000}};
  for (const auto& c : cases) {
    auto snap = config::load_from_json(c.doc, env).snap;
    ASSERT_TRUE(snap) << c.doc.dump();
    EXPECT_EQ(idempotency_ttl(*snap).count(), c.want_ttl_s) << c.doc.dump();
    EXPECT_EQ(idempotency_in_flight_timeout(*snap).count(), c.want_in_flight_ms) << c.doc.dump();
  }
}
