#pragma once
// The one mapping from domain outcomes to HTTP status + envelope code (statuses
// say what the client should do next; no business exception becomes a 500, no authorization denial
// becomes anything but 403, and internal details never reach the client).

#include "http/server/message.hpp"

#include <nlohmann/json.hpp>

#include <string_view>

namespace changeflow::http::middleware {

enum class api_outcome {
  accepted,              // 202 ACCEPTED: new request taken, poll for its state
  duplicate_submit,      // 202 DUPLICATE_SUBMIT: same request seen before; keep the form locked
  in_progress,           // 409 IN_PROGRESS: the same operation is still running
  request_in_flight,     // 409 REQUEST_IN_FLIGHT: first request with this idempotency key running
  ok,                    // 200 OK
  not_found,             // 404 NOT_FOUND
  bad_request,           // 400 BAD_REQUEST: fix the request
  unauthenticated,       // 401 UNAUTHENTICATED
  forbidden,             // 403 FORBIDDEN, message always "Access denied"
  access_closed,         // 403 ACCESS_CLOSED: user writes are switched off (access.mode/window)
  rate_limited,          // 429 RATE_LIMITED
  conflict,              // 409 CONFLICT: state changed underneath (stale write)
  already_merged,        // 409 ALREADY_MERGED: the change merged, so it cannot be cancelled or closed
  idempotency_mismatch,  // 422 IDEMPOTENCY_KEY_REUSED: same key, different body
  unavailable,           // 503 UNAVAILABLE: a dependency is down, retry later
  overloaded,            // 503 OVERLOADED: our worker pool is full, retry later
  internal,              // 500 INTERNAL_ERROR: generic message + error id
  method_not_allowed,    // 405 METHOD_NOT_ALLOWED: the path exists, the method does not (Allow header)
  busy,                  // 409 BUSY: the batch coordinator is driving another round; retry shortly
  not_blocked,           // 409 NOT_BLOCKED: only a BLOCKED batch can be unblocked
  batch_disabled,        // 503 BATCH_DISABLED: no batch coordinator runs in this instance
  delivery_id_reused,    // 409 DELIVERY_ID_REUSED: a callback id already used for another operation
  created,               // 201 CREATED: a resource was created (a subscription)
  already_reverted,      // 409 ALREADY_REVERTED: the change has a revert in flight or in effect
};

struct status_mapping {
  unsigned status;
  std::string_view code;
  std::string_view default_message;
};

/// Exhaustive: adding an outcome without mapping it is a -Wswitch warning.
status_mapping map_outcome(api_outcome o);

/// Builds the envelope for an outcome. `message` replaces the default for client-facing outcomes,
/// except forbidden/unauthenticated whose messages are fixed. For internal and unavailable the
/// message and data are ignored: the client gets a generic message and an error id, and
/// `log_detail` goes to the log under that id (http::internal_error).
http_server::response outcome_response(api_outcome o, std::string_view message = {},
                                       const nlohmann::json& data = nullptr, std::string_view log_detail = {});

}  // namespace changeflow::http::middleware
