#pragma once
// Request idempotency (API seeds 3.6, database seeds 3.4): look up, insert IN_FLIGHT, and on a
// duplicate-key conflict re-read the winner. No explicit lock: the PRIMARY KEY decides the winner.
// Expired records count as absent and are cleaned up through the expires_at index (DB clock).

#include "persistence/result.hpp"

#include <cppconn/connection.h>

#include <optional>
#include <string>

namespace changeflow::persistence {

enum class idem_state { IN_FLIGHT, COMPLETED };

struct idem_record {
  std::string key;
  std::string
      fingerprint;  // sha256 hex of the request; a different one means "same key, other request"
  idem_state state = idem_state::IN_FLIGHT;
  std::optional<int> status_code;
  std::optional<std::string> response_body;
  std::int64_t created_at_ms = 0;
  std::int64_t expires_at_ms = 0;
};

struct idem_begin_result {
  bool fresh = false;  // this call inserted the IN_FLIGHT record and owns the request
  std::optional<idem_record> existing;  // the winner's record when !fresh
};

/// retryable when the winner vanished between conflict and re-read (deleted as expired, abandoned).
db_result<idem_begin_result> idem_begin(sql::Connection& conn, const std::string& key,
                                        const std::string& fingerprint, int ttl_seconds);
/// IN_FLIGHT -> COMPLETED with the stored response; preempted when not IN_FLIGHT (or gone).
db_result<done> idem_complete(sql::Connection& conn, const std::string& key, int status_code,
                              const std::string& body);
/// Drops an IN_FLIGHT record whose request failed before producing a response, so a retry may run.
db_result<done> idem_abandon(sql::Connection& conn, const std::string& key);
db_result<std::optional<idem_record>> idem_find(sql::Connection& conn, const std::string& key);
/// Deletes up to `limit` expired records (expires_at < NOW(3)); returns how many.
db_result<int> idem_delete_expired(sql::Connection& conn, int limit);

}  // namespace changeflow::persistence
