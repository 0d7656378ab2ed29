#include "http/middleware/error_mapping.hpp"

#include <gtest/gtest.h>

using namespace changeflow;
using namespace changeflow::http::middleware;
using nlohmann::json;

TEST(ErrorMapping, EveryOutcomeTableDriven) {
  struct mapping_case {
    api_outcome outcome;
    unsigned status;
    const char* code;
  };
  const mapping_case cases[] = {
      {api_outcome::accepted, 202, "ACCEPTED"},
      {api_outcome::duplicate_submit, 202, "DUPLICATE_SUBMIT"},
      {api_outcome::in_progress, 409, "IN_PROGRESS"},
      {api_outcome::ok, 200, "OK"},
      {api_outcome::not_found, 404, "NOT_FOUND"},
      {api_outcome::bad_request, 400, "BAD_REQUEST"},
      {api_outcome::unauthenticated, 401, "UNAUTHENTICATED"},
      {api_outcome::forbidden, 403, "FORBIDDEN"},
      {api_outcome::rate_limited, 429, "RATE_LIMITED"},
      {api_outcome::conflict, 409, "CONFLICT"},
      {api_outcome::already_merged, 409, "ALREADY_MERGED"},
      {api_outcome::idempotency_mismatch, 422, "IDEMPOTENCY_KEY_REUSED"},
      {api_outcome::unavailable, 503, "UNAVAILABLE"},
      {api_outcome::overloaded, 503, "OVERLOADED"},
      {api_outcome::internal, 500, "INTERNAL_ERROR"},
      {api_outcome::request_in_flight, 409, "REQUEST_IN_FLIGHT"},
      {api_outcome::access_closed, 403, "ACCESS_CLOSED"},
      {api_outcome::method_not_allowed, 405, "METHOD_NOT_ALLOWED"},
      {api_outcome::busy, 409, "BUSY"},
      {api_outcome::not_blocked, 409, "NOT_BLOCKED"},
      {api_outcome::batch_disabled, 503, "BATCH_DISABLED"},
      {api_outcome::created, 201, "CREATED"},
      {api_outcome::already_reverted, 409, "ALREADY_REVERTED"},
  };
  for (const auto& c : cases) {
    auto m = map_outcome(c.outcome);
    EXPECT_EQ(m.status, c.status) << c.code;
    EXPECT_EQ(m.code, c.code);
    auto r = outcome_response(c.outcome, "custom message", {{"k", 1}}, "secret detail");
    EXPECT_EQ(r.status, c.status) << c.code;
    auto body = json::parse(r.body);
    EXPECT_EQ(body["code"], c.code);
    EXPECT_EQ(r.body.find("secret detail"), std::string::npos) << c.code << ": log detail never reaches the client";
  }
}

TEST(ErrorMapping, FixedAndGenericMessages) {
  auto forbidden = json::parse(outcome_response(api_outcome::forbidden, "you need changeflow.admin").body);
  EXPECT_EQ(forbidden["message"], "Access denied");
  auto unauth = json::parse(outcome_response(api_outcome::unauthenticated, "token expired at 12:00").body);
  EXPECT_EQ(unauth["message"], "Authentication required");

  auto internal = json::parse(outcome_response(api_outcome::internal, "NullPointer at foo.cpp:12").body);
  EXPECT_EQ(internal["message"], "Internal error");
  EXPECT_TRUE(internal["data"]["errorId"].is_string()) << "the error id ties the reply to the log line";

  auto unavailable = json::parse(outcome_response(api_outcome::unavailable, "db down").body);
  EXPECT_EQ(unavailable["code"], "UNAVAILABLE");
  EXPECT_NE(unavailable["message"], "db down");

  auto accepted = json::parse(outcome_response(api_outcome::accepted, {}, {{"operationId", "op-1"}}).body);
  EXPECT_EQ(accepted["data"]["operationId"], "op-1");
  auto dup = json::parse(outcome_response(api_outcome::duplicate_submit, {}, {{"operationId", "op-1"}}).body);
  EXPECT_EQ(dup["code"], "DUPLICATE_SUBMIT") << "same status as ACCEPTED, different code: the form stays locked";

  auto bad = json::parse(outcome_response(api_outcome::bad_request, "field 'project' is required").body);
  EXPECT_EQ(bad["message"], "field 'project' is required") << "client errors carry the actionable message";

  auto overloaded = outcome_response(api_outcome::overloaded);
  bool has_retry_after = false;
  for (auto& [k, v] : overloaded.headers) has_retry_after |= (k == "Retry-After");
  EXPECT_TRUE(has_retry_after);
}
