#pragma once
// Answers shared by the handlers, built on the one outcome mapping (middleware/error_mapping.hpp).

#include "http/server/message.hpp"
#include "persistence/errors.hpp"
#include "service/idempotency.hpp"

#include <string_view>

namespace changeflow::http {

/// A repository failure: 503 UNAVAILABLE when retrying can help, else 500; the detail is logged,
/// never answered.
http_server::response db_failure(const persistence::db_error& e);

/// The answer to a request the idempotency gate did not let run (replay, 422, 409, or the database
/// failure); `key` names the key in the log line of a 422.
http_server::response gate_response(const service::gate_result& g, std::string_view key);

}  // namespace changeflow::http
