#pragma once
// Periodic cleanup of expired idempotency records (actors/periodic_job.hpp): every
// idempotency.cleanup_interval_ms (hot; <= 0 pauses the cleanup) ONE job on the database pool deletes
// expired rows in batches of idempotency.cleanup_batch through the expires_at index
// (persistence::idem_delete_expired), so no single statement holds locks for long. Expired records are
// already ignored by reads (the repository filters on expires_at), so the cleanup only bounds table
// growth: running late is harmless. Every instance runs it; concurrent DELETEs of the same expired rows
// are harmless.

#include "actors/periodic_job.hpp"
#include "runtime/services.hpp"

namespace changeflow::actors {

void start_idempotency_cleanup(runtime::services& svc, periodic_job& job);

}  // namespace changeflow::actors
