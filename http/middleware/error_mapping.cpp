#include "http/middleware/error_mapping.hpp"

#include "base/log.hpp"
#include "http/envelope.hpp"
#include "http/middleware/authorization.hpp"

namespace changeflow::http::middleware {

status_mapping map_outcome(api_outcome o) {
  switch (o) {
    case api_outcome::accepted: return {202, "ACCEPTED", "Request accepted"};
    case api_outcome::duplicate_submit: return {202, "DUPLICATE_SUBMIT", "This request was already submitted"};
    case api_outcome::in_progress: return {409, "IN_PROGRESS", "The same request is still being processed"};
    case api_outcome::request_in_flight:
      return {409, "REQUEST_IN_FLIGHT",
              "The first request with this idempotency key is still being processed; retry shortly "
              "to receive its response"};
    case api_outcome::access_closed:
      return {403, "ACCESS_CLOSED", "Submissions are closed at the moment; try again during the access window"};
    case api_outcome::ok: return {200, "OK", "OK"};
    case api_outcome::not_found: return {404, "NOT_FOUND", "Not found"};
    case api_outcome::bad_request: return {400, "BAD_REQUEST", "Invalid request"};
    case api_outcome::unauthenticated: return {401, "UNAUTHENTICATED", authentication_required_message};
    case api_outcome::forbidden: return {403, "FORBIDDEN", access_denied_message};
    case api_outcome::rate_limited: return {429, "RATE_LIMITED", "Too many requests, please try again later"};
    case api_outcome::conflict: return {409, "CONFLICT", "The resource changed meanwhile; reload and retry"};
    case api_outcome::already_merged: return {409, "ALREADY_MERGED", "The change has already merged: merged wins"};
    case api_outcome::delivery_id_reused:
      return {409, "DELIVERY_ID_REUSED", "This delivery id was already used for another operation; send a new id"};
    case api_outcome::idempotency_mismatch:
      return {422, "IDEMPOTENCY_KEY_REUSED", "This operation id was already used for a different request"};
    case api_outcome::unavailable: return {503, "UNAVAILABLE", "Service temporarily unavailable, retry later"};
    // 503, not 429: a full worker pool is our capacity problem, not the caller's quota. 429 would
    // tell a well-behaved client it is misbehaving; 503 + Retry-After says "retry later" neutrally
    // and is what load balancers and clients treat as retryable.
    case api_outcome::overloaded: return {503, "OVERLOADED", "Service is busy, please retry shortly"};
    case api_outcome::internal: return {500, "INTERNAL_ERROR", "Internal error"};
    case api_outcome::method_not_allowed: return {405, "METHOD_NOT_ALLOWED", "Method not allowed on this endpoint"};
    case api_outcome::busy: return {409, "BUSY", "The coordinator is driving another round; retry shortly"};
    case api_outcome::not_blocked: return {409, "NOT_BLOCKED", "The batch is not BLOCKED"};
    case api_outcome::batch_disabled: return {503, "BATCH_DISABLED", "No batch coordinator runs in this instance"};
    case api_outcome::created: return {201, "CREATED", "Created"};
    case api_outcome::already_reverted:
      return {409, "ALREADY_REVERTED", "The change is already reverted; its revert is named in data"};
  }
  return {500, "INTERNAL_ERROR", "Internal error"};
}

http_server::response outcome_response(api_outcome o, std::string_view message, const nlohmann::json& data,
                                       std::string_view log_detail) {
  auto m = map_outcome(o);
  switch (o) {
    case api_outcome::internal: return internal_error(log_detail.empty() ? "internal outcome" : log_detail, 500);
    case api_outcome::unavailable: return internal_error(log_detail.empty() ? "unavailable outcome" : log_detail, 503);
    case api_outcome::overloaded: {
      auto r = envelope(m.status, m.code, m.default_message);
      r.set_header("Retry-After", "1");
      return r;
    }
    case api_outcome::unauthenticated:
    case api_outcome::forbidden:  // fixed messages: reveal nothing about what was missing
      return client_error(m.status, m.code, m.default_message, log_detail);
    case api_outcome::accepted:
    case api_outcome::duplicate_submit:
    case api_outcome::created:
    case api_outcome::ok: return envelope(m.status, m.code, message.empty() ? m.default_message : message, data);
    case api_outcome::request_in_flight: {
      if (!log_detail.empty()) {
        log::warn("http.rejected", {{"code", m.code}, {"status", m.status}, {"detail", std::string(log_detail)}});
      }
      auto r = envelope(m.status, m.code, message.empty() ? m.default_message : message, data);
      r.set_header("Retry-After", "1");
      return r;
    }
    case api_outcome::access_closed:
    case api_outcome::in_progress:
    case api_outcome::not_found:
    case api_outcome::bad_request:
    case api_outcome::rate_limited:
    case api_outcome::conflict:
    case api_outcome::already_merged:
    case api_outcome::method_not_allowed:
    case api_outcome::busy:
    case api_outcome::not_blocked:
    case api_outcome::batch_disabled:
    case api_outcome::delivery_id_reused:
    case api_outcome::already_reverted:
    case api_outcome::idempotency_mismatch: {
      if (!log_detail.empty()) {
        log::warn("http.rejected", {{"code", m.code}, {"status", m.status}, {"detail", std::string(log_detail)}});
      }
      return envelope(m.status, m.code, message.empty() ? m.default_message : message, data);
    }
  }
  return internal_error("unmapped api_outcome");
}

}  // namespace changeflow::http::middleware
