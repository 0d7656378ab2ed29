#pragma once
// Request idempotency: look up, insert IN_FLIGHT, and on a
// duplicate-key conflict re-read the winner. No explicit lock: the PRIMARY KEY decides the winner.
// Expired records count as absent and are cleaned up through the expires_at index (DB clock).
// An IN_FLIGHT record whose request died (its instance's lease ran out, it stopped or restarted, or
// the record's in-flight deadline passed) is taken over by the next request with the same key and
// fingerprint, so a crash between begin and complete does not block the key until it expires.

#include "persistence/result.hpp"
#include "persistence/session.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace sql {
class Connection;
}  // namespace sql

namespace changeflow::persistence {

enum class idem_state { IN_FLIGHT, COMPLETED };

struct idem_record {
  std::string key;
  std::string fingerprint;  // sha256 hex of the request; a different one means "same key, other request"
  idem_state state = idem_state::IN_FLIGHT;
  std::optional<int> status_code;
  std::optional<std::string> response_body;
  std::int64_t created_at_ms = 0;
  std::int64_t expires_at_ms = 0;
  std::optional<std::string> owner_instance;  // NULL on records older than migration 4
  int takeovers = 0;                          // fencing counter: the takeover UPDATE is pinned to the value read
  // IN_FLIGHT and, judged with the DB clock, its request is dead: the owner's lease ran out, it
  // stopped or restarted (other epoch), or the in-flight deadline passed.
  bool reclaimable = false;
  /// The change a submission under this key creates (migration 19); none on records from before it
  /// and on keys of other requests.
  std::optional<std::string> operation_id;
};

/// Who begins a request: recorded on the IN_FLIGHT record so a later request can tell whether it
/// still runs.
struct idem_owner {
  std::string instance_id;  // "" = unknown owner: only the in-flight deadline frees the record
  std::chrono::milliseconds in_flight_timeout{30000};
};

struct idem_begin_result {
  bool fresh = false;                   // this call inserted (or took over) the IN_FLIGHT record and owns the request
  bool taken_over = false;              // fresh by taking over the record of a request that died
  std::optional<idem_record> existing;  // the winner's record when !fresh
  /// When fresh: the change this key names. The `operation_id` given, when this call inserted the
  /// record; the record's own, when it took a dead request's record over (that request may have
  /// created it already). nullopt when the record names none.
  std::optional<std::string> operation_id;
};

/// A reclaimable record with the same fingerprint is taken over (fresh); with another fingerprint
/// it is reported as it is, so the caller still answers "key reused".
/// retryable when the winner vanished between conflict and re-read (deleted as expired, abandoned),
/// or a racing takeover won and then vanished.
/// `operation_id`: the change this request would create, stored with a record it inserts ("" none).
db_result<idem_begin_result> idem_begin(session s, const std::string& key, const std::string& fingerprint,
                                        int ttl_seconds, const idem_owner& owner, const std::string& operation_id = {});
/// The INSERT of a record that is COMPLETED from the start, with its stored response: for a request
/// whose answer is known before it runs and whose record commits in the same transaction as its
/// work (a keyed submission in the group commit: persistence::keyed_creation). Any record under
/// the key, live or expired, makes it fail with a duplicate key (1062); the caller's handler
/// decides what that means.
std::string idem_completed_insert_sql(sql::Connection& conn, const std::string& key, const std::string& fingerprint,
                                      int ttl_seconds, const idem_owner& owner, int status_code,
                                      const std::string& body, const std::string& operation_id = {});
/// IN_FLIGHT -> COMPLETED with the stored response; preempted when not IN_FLIGHT (or gone).
db_result<done> idem_complete(session s, const std::string& key, int status_code, const std::string& body);
/// Drops an IN_FLIGHT record whose request failed before producing a response, so a retry may run.
db_result<done> idem_abandon(session s, const std::string& key);
/// Deletes up to `limit` expired records (expires_at < NOW(3)); returns how many.
db_result<int> idem_delete_expired(session s, int limit);

}  // namespace changeflow::persistence
