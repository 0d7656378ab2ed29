#include "http/handlers/answers.hpp"

#include "http/middleware/error_mapping.hpp"

#include <string>

namespace changeflow::http {

using middleware::api_outcome;
using middleware::outcome_response;

http_server::response db_failure(const persistence::db_error& e) {
  const auto outcome =
      e.outcome == persistence::db_outcome::retryable ? api_outcome::unavailable : api_outcome::internal;
  return outcome_response(outcome, {}, nullptr, "database: " + e.message);
}

http_server::response gate_response(const service::gate_result& g, std::string_view key) {
  switch (g.verdict) {
    case service::gate_verdict::replay: {
      http_server::response replay;
      replay.status = g.replay.status;
      replay.body = g.replay.body;
      replay.set_header("Idempotent-Replayed", "true");
      return replay;
    }
    case service::gate_verdict::mismatch:
      return outcome_response(api_outcome::idempotency_mismatch, {}, nullptr,
                              "idempotency key reused: " + std::string(key));
    case service::gate_verdict::in_flight: return outcome_response(api_outcome::request_in_flight);
    case service::gate_verdict::failed:
    case service::gate_verdict::run: break;
  }
  return db_failure(g.error);
}

}  // namespace changeflow::http
