#pragma once
// The pure half of idempotency (the original response is
// replayed, and a reused key with a different body is refused instead of silently deduplicated).
// The database half (insert-or-reread on the unique key, TTL sweep) lives in persistence and stores
// `idempotency_record` as defined here.
//
//   no record / expired ──> proceed_fresh (caller inserts IN_FLIGHT, runs, then COMPLETES it)
//   same fingerprint, COMPLETED ──> replay_stored_response (same status and body as the first time)
//   same fingerprint, IN_FLIGHT ──> in_flight_409 (the first request is still running; a record
//                                   whose request died never gets here: persistence::idem_begin
//                                   takes it over and the caller proceeds fresh)
//   different fingerprint ──> conflict_changed_body_422 (key reused for another request)

#include "config/snapshot.hpp"
#include "persistence/idempotency_repo.hpp"
#include "runtime/services.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace changeflow::service {

enum class idempotency_state { in_flight, completed };

std::string_view to_string(idempotency_state s);                               // "IN_FLIGHT" | "COMPLETED"
std::optional<idempotency_state> parse_idempotency_state(std::string_view s);  // inverse; nullopt if unknown

/// One row of the idempotency_record table.
struct idempotency_record {
  std::string key;          // client-supplied operationId (scoped by the caller as it sees fit)
  std::string fingerprint;  // request_fingerprint() of the first request with this key
  idempotency_state state = idempotency_state::in_flight;
  unsigned status = 0;        // HTTP status of the stored response (COMPLETED only)
  std::string response_body;  // body of the stored response (COMPLETED only)
  std::chrono::system_clock::time_point expires_at{};
};

/// Whitespace- and key-order-insensitive form of a JSON body (parse, dump with sorted keys);
/// bodies that are not valid JSON are kept byte for byte (prefixed so they never collide).
std::string canonical_body(std::string_view body);

/// Lower-case hex SHA-256 over method, route template and canonical body.
std::string request_fingerprint(std::string_view method, std::string_view route_template, std::string_view body);

enum class idempotency_decision { proceed_fresh, replay_stored_response, conflict_changed_body_422, in_flight_409 };

std::string_view to_string(idempotency_decision d);

/// What to do with a request whose key found `existing` (nullopt = no row). A record past its
/// expires_at counts as absent (the TTL sweep may not have run yet).
idempotency_decision decide(const std::optional<idempotency_record>& existing, std::string_view fingerprint,
                            std::chrono::system_clock::time_point now);

/// idempotency.ttl_seconds; missing, cleared or <= 0 -> 86400.
std::chrono::seconds idempotency_ttl(const config::snapshot& snap);

/// idempotency.in_flight_timeout_ms; missing, cleared or <= 0 -> 30000.
std::chrono::milliseconds idempotency_in_flight_timeout(const config::snapshot& snap);

// -- The protocol, once for every idempotent write (submit, operator actions)

/// What the first request answered: replayed byte for byte to a retry.
struct stored_answer {
  unsigned status = 0;
  std::string body;
};

/// An `Idempotency-Key` a client may send: 1..200 printable ASCII characters (the scoped key must
/// fit the record's VARCHAR(255)).
bool valid_idempotency_key(std::string_view key);

/// The stored key: `scope:who:key`, so another caller's identical key is another request (a scoped
/// key too long for the record is hashed).
std::string scoped_idempotency_key(std::string_view scope, std::string_view who, std::string_view key);

/// One idempotent request.
struct idempotent_request {
  std::string key;          // scoped by who asks ("submit:<requester>:<key>", "ops:<operator>:<key>")
  std::string fingerprint;  // request_fingerprint of the request
  std::chrono::seconds ttl{86400};
  std::chrono::milliseconds in_flight_timeout{30000};
  std::string route;  // "submit" | "ops": logs and metrics
  /// The change this request creates, stored with the key when it takes it ("" none): a retry that
  /// takes over the key of a request that died creates that same change, not a second one.
  std::string operation_id;
  /// The id a request of a version before migration 19 derived from the key for that change ("" the
  /// same as operation_id): used when a record that names no change is taken over.
  std::string legacy_operation_id;
};

enum class gate_verdict {
  run,        // this request owns the key (fresh, or taken over from a request that died): run it
  replay,     // answer `replay`, the first request's stored answer
  mismatch,   // the key was used for another body: 422
  in_flight,  // the first request is still running: 409, retry later
  failed,     // the database could not be asked: `error`
};
struct gate_result {
  gate_verdict verdict = gate_verdict::failed;
  stored_answer replay;
  persistence::db_error error;
  /// run: the change this request creates (idempotent_request::operation_id when it took the key
  /// afresh; a dead request's, or the legacy id, when it took that request's key over).
  std::string operation_id;
};

/// Begins the key (insert IN_FLIGHT, or read the winner's record). A record left IN_FLIGHT by a
/// request that died is taken over (logged and counted in changeflow_idempotency_takeovers_total):
/// re-running is safe because every idempotent write is itself guarded (the operation id the key
/// names, a version-guarded transition).
gate_result begin_idempotent(persistence::session db, runtime::services& svc, const idempotent_request& r);

/// Ends a request that owned its key: a 2xx answer is stored for replay; any other answer drops the
/// record, so a retry runs afresh instead of replaying a transient failure forever.
void finish_idempotent(persistence::session db, const idempotent_request& r, const stored_answer& answer);

}  // namespace changeflow::service
