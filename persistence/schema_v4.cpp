// Migration 4: idempotency records of dead requests can be taken over.
//
// An IN_FLIGHT record used to block its key until the TTL (a day by default) when the process that
// began it died before completing or abandoning it. Now the record says who began it and until when
// it may stay in flight, so the next request with the same key can tell a running request from a
// dead one and take the record over (persistence::idem_begin):
//   owner_instance / owner_epoch  the instance and its registration epoch (instance.epoch) that
//                                 began the request; a restart under the same id bumps the epoch,
//                                 so the records of the killed process are recognisably dead
//   in_flight_until               DB clock deadline after which the record counts as abandoned
//                                 even when its owner looks alive
//                                 (idempotency.in_flight_timeout_ms)
//   takeovers                     bumped by every takeover; the takeover UPDATE is pinned to the
//                                 value it read, so of two racing retries exactly one wins
// Rows written before this migration (or by a binary that predates it) have NULL owner and deadline
// and keep the old behaviour: they block until they expire. Guessing that they are dead could run a
// request twice while an old instance is still executing it during a rolling upgrade.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v4() {
  return {
      R"sql(
ALTER TABLE idempotency_record
  ADD COLUMN IF NOT EXISTS owner_instance  VARCHAR(128) NULL COMMENT 'instance that began the request',
  ADD COLUMN IF NOT EXISTS owner_epoch     BIGINT       NULL COMMENT 'instance.epoch when the request began',
  ADD COLUMN IF NOT EXISTS in_flight_until DATETIME(3)  NULL COMMENT 'IN_FLIGHT past this (DB clock) may be taken over',
  ADD COLUMN IF NOT EXISTS takeovers       INT          NOT NULL DEFAULT 0 COMMENT 'fencing counter of takeovers')sql",
  };
}

}  // namespace changeflow::persistence
