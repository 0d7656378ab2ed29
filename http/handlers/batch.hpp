#pragma once
// Ops endpoints of the batch path:
//   GET  /api/v1/ops/batches                 newest first (?before=<id>&limit=)
//   GET  /api/v1/ops/batches/{id}            one batch with its members, and the waiting set
//   POST /api/v1/ops/batches/{id}/settle     close the MR, re-read, merged wins, else fail + requeue
//   POST /api/v1/ops/batches/{id}/unblock    BLOCKED -> RUNNING, and the coordinator drives it again
//   POST /api/v1/ops/batch/round             run a round now (the answer says if one was started)
// Every route declares the ops rules ("auth.ops_rules", default changeflow.ops / changeflow.admin).
#include "actors/batch_coordinator.hpp"
#include "http/api.hpp"

#include <optional>

namespace changeflow::http {
void add_batch_routes(router& r, service_context& ctx, std::optional<actors::batch_coordinator> coordinator);
}  // namespace changeflow::http
