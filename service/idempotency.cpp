#include "service/idempotency.hpp"

#include "base/ids.hpp"
#include "base/log.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace changeflow::service {

bool valid_idempotency_key(std::string_view key) {
  constexpr std::size_t max_length = 200;
  if (key.empty() || key.size() > max_length) return false;
  return std::all_of(key.begin(), key.end(), [](unsigned char c) { return c > 0x20 && c < 0x7f; });
}

std::string scoped_idempotency_key(std::string_view scope, std::string_view who, std::string_view key) {
  std::string scoped = std::string(scope) + ":" + std::string(who) + ":" + std::string(key);
  if (scoped.size() > 250) scoped = std::string(scope) + ":" + ids::sha256_hex(scoped);
  return scoped;
}

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
  return std::chrono::seconds(snap.idempotency().ttl_seconds);
}

std::chrono::milliseconds idempotency_in_flight_timeout(const config::snapshot& snap) {
  return std::chrono::milliseconds(snap.idempotency().in_flight_timeout_ms);
}

gate_result begin_idempotent(persistence::session db, runtime::services& svc, const idempotent_request& r) {
  gate_result out;
  auto begun = persistence::idem_begin(db, r.key, r.fingerprint, static_cast<int>(r.ttl.count()),
                                       {svc.instance_id, r.in_flight_timeout}, r.operation_id);
  if (!begun.ok()) {
    out.error = begun.error;
    return out;
  }
  if (begun.value.taken_over) {
    log::warn("idempotency.taken_over", {{"key", r.key}, {"route", r.route}});
    svc.metrics->inc("changeflow_idempotency_takeovers_total",
                     "Idempotency keys of dead requests taken over by a retry", {{"route", r.route}});
  }
  if (begun.value.fresh) {
    out.verdict = gate_verdict::run;
    // A record that names no change was taken over from a request that derived its change's id
    // from the key.
    out.operation_id = begun.value.operation_id.value_or(
        begun.value.taken_over && !r.legacy_operation_id.empty() ? r.legacy_operation_id : r.operation_id);
    return out;
  }
  const auto& rec = *begun.value.existing;
  idempotency_record existing;
  existing.key = rec.key;
  existing.fingerprint = rec.fingerprint;
  existing.state =
      rec.state == persistence::idem_state::COMPLETED ? idempotency_state::completed : idempotency_state::in_flight;
  existing.status = static_cast<unsigned>(rec.status_code.value_or(0));
  existing.response_body = rec.response_body.value_or("");
  // The database already filtered out expired records with ITS clock; do not re-judge expiry with
  // ours (two clocks would disagree near the boundary).
  existing.expires_at = std::chrono::system_clock::time_point::max();
  switch (decide(existing, r.fingerprint, std::chrono::system_clock::now())) {
    case idempotency_decision::replay_stored_response:
      out.verdict = gate_verdict::replay;
      out.replay = {existing.status, existing.response_body};
      return out;
    case idempotency_decision::conflict_changed_body_422: out.verdict = gate_verdict::mismatch; return out;
    case idempotency_decision::in_flight_409: out.verdict = gate_verdict::in_flight; return out;
    case idempotency_decision::proceed_fresh: break;  // unreachable: the record is live
  }
  out.error = {persistence::db_outcome::retryable, 0, "idempotency record vanished: " + r.key};
  return out;
}

void finish_idempotent(persistence::session db, const idempotent_request& r, const stored_answer& answer) {
  if (answer.status >= 200 && answer.status < 300) {
    auto done = persistence::idem_complete(db, r.key, static_cast<int>(answer.status), answer.body);
    if (!done.ok()) log::warn("idempotency.complete_failed", {{"key", r.key}, {"error", done.error.message}});
    return;
  }
  auto dropped = persistence::idem_abandon(db, r.key);
  if (!dropped.ok()) log::warn("idempotency.abandon_failed", {{"key", r.key}, {"error", dropped.error.message}});
}

}  // namespace changeflow::service
