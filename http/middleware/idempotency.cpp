#include "http/middleware/idempotency.hpp"

#include "base/ids.hpp"

#include <nlohmann/json.hpp>

namespace changeflow::http::middleware {

std::string_view to_string(idempotency_state s) {
  switch (s) {
    case idempotency_state::in_flight: return "IN_FLIGHT";
    case idempotency_state::completed: return "COMPLETED";
  }
  return "IN_FLIGHT";
}

std::optional<idempotency_state> parse_idempotency_state(std::string_view s) {
  if (s == "IN_FLIGHT") return idempotency_state::in_flight;
  if (s == "COMPLETED") return idempotency_state::completed;
  return std::nullopt;
}

std::string canonical_body(std::string_view body) {
  auto parsed = nlohmann::json::parse(body, nullptr, false);
  if (!parsed.is_discarded()) {
    try {
      // nlohmann::json objects are std::map-backed: dump() emits keys sorted, without whitespace.
      return "json:" + parsed.dump();
    } catch (const nlohmann::json::exception&) {
      // invalid UTF-8 inside a string: fall through to the raw bytes
    }
  }
  return "raw:" + std::string(body);
}

std::string request_fingerprint(std::string_view method, std::string_view route_template, std::string_view body) {
  std::string material;
  material.reserve(method.size() + route_template.size() + body.size() + 8);
  material.append(method).append("\n").append(route_template).append("\n").append(canonical_body(body));
  return ids::sha256_hex(material);
}

std::string_view to_string(idempotency_decision d) {
  switch (d) {
    case idempotency_decision::proceed_fresh: return "proceed_fresh";
    case idempotency_decision::replay_stored_response: return "replay_stored_response";
    case idempotency_decision::conflict_changed_body_422: return "conflict_changed_body_422";
    case idempotency_decision::in_flight_409: return "in_flight_409";
  }
  return "in_flight_409";
}

idempotency_decision decide(const std::optional<idempotency_record>& existing, std::string_view fingerprint,
                            std::chrono::system_clock::time_point now) {
  if (!existing || existing->expires_at <= now) return idempotency_decision::proceed_fresh;
  // A different body under the same key is a client bug; replaying the first answer would hide it.
  if (!ids::constant_time_equal(existing->fingerprint, fingerprint)) {
    return idempotency_decision::conflict_changed_body_422;
  }
  switch (existing->state) {
    case idempotency_state::completed: return idempotency_decision::replay_stored_response;
    case idempotency_state::in_flight: return idempotency_decision::in_flight_409;
  }
  return idempotency_decision::in_flight_409;
}

std::chrono::seconds idempotency_ttl(const config::snapshot& snap) {
  auto ttl = snap.get_int("idempotency.ttl_seconds");
  return std::chrono::seconds(ttl && *ttl > 0 ? *ttl : 86400);
}

std::chrono::milliseconds idempotency_in_flight_timeout(const config::snapshot& snap) {
  auto timeout = snap.get_int("idempotency.in_flight_timeout_ms");
  return std::chrono::milliseconds(timeout && *timeout > 0 ? *timeout : 30000);
}

}  // namespace changeflow::http::middleware
