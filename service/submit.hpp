#pragma once
// A user's submission: the idempotency protocol (service/idempotency), then create the operation
// and start its actor. Runs on a database worker; the HTTP layer parses the body, decides the
// operation's id and renders the result.

#include "persistence/operation_repo.hpp"
#include "persistence/session.hpp"
#include "runtime/services.hpp"
#include "service/idempotency.hpp"

#include <functional>
#include <optional>
#include <string>

namespace changeflow::service {

enum class submit_status {
  accepted,   // created now and its actor started: `created`
  duplicate,  // this operation already exists (not a replay of a stored answer): the client keeps polling
  blocked,    // another change holds the target: `blocker` when it could be read, else `blocking_id`
  failed,     // the database failed: `error`
};

struct submit_result {
  submit_status status = submit_status::failed;
  std::string operation_id;            // the change this submission names (a keyed retry's may be an earlier request's)
  persistence::operation_row created;  // accepted
  std::optional<persistence::operation_row> blocker;  // blocked: the change that holds the target, still held
  std::optional<std::string> blocking_id;             // blocked: read from the binding (it may have ended since)
  persistence::db_error error;                        // failed
  // duplicate: what became of the change's actor (service::wake_actor's answer: spawned when this
  // submission had created it and lost the answer, none_needed, owner:<instance>, ...), empty when
  // one was live already.
  std::string actor;
};

/// What a creation of `op` answered (create_operation, or the creation inside create_revert),
/// carried out: the actor started for a created operation, the holder of the target read for a
/// refused one.
submit_result start_created(persistence::session db, runtime::services& svc, const persistence::new_operation& op,
                            const persistence::db_result<persistence::create_outcome>& created);

/// Turns a result into the wire answer (called once per submission that ran); a 2xx answer is
/// stored for replay under the key.
using submit_render = std::function<stored_answer(const submit_result&)>;

/// Submits `op`. Without a key (idem.key == "") nothing is deduplicated beyond the operation id.
/// Returns the gate's answer when the idempotency gate did not let the submission run (replay, 409,
/// 422, database failure), else nullopt (render has run).
std::optional<gate_result> submit(persistence::session db, runtime::services& svc, const persistence::new_operation& op,
                                  const idempotent_request& idem, const submit_render& render);

/// Submits `op` without an idempotency key through the group committer
/// (runtime::services::transitions): the creation commits with the transitions and callbacks ready
/// at the same moment. `done` runs once with the result, on a database worker. False when there is
/// no committer, it refused (a full queue), or the creation would be refused before any SQL: nothing
/// was done and the caller runs submit() itself.
bool submit_grouped(runtime::services& svc, const persistence::new_operation& op,
                    std::function<void(const submit_result&)> done);

/// Submits `op` under its idempotency key through the group committer: the key's record is written
/// COMPLETED with `accepted` (the answer a created change gets, rendered before it runs) in the same
/// commit as the creation, so a keyed submission costs what one without a key does. `done` runs when
/// the group created the change (the caller answers `accepted`). Every other case (a record under
/// the key, the target held, a failed group or one whose answer was lost) runs `alone` on a database
/// worker instead: the caller's submit() of the same request, whose gate replays, refuses or runs
/// it. A change left without its actor after that (created by a group whose answer was lost, then
/// replayed) gets one. False as for submit_grouped, and also while the test hook
/// faults.hold_after_idempotency_begin_ms is set (it holds the keyed path between its two writes,
/// which this path does not have): the caller runs submit() itself.
bool submit_grouped(runtime::services& svc, const persistence::new_operation& op, const idempotent_request& idem,
                    const stored_answer& accepted, std::function<void(const submit_result&)> done,
                    std::function<void(persistence::db_context&)> alone);

}  // namespace changeflow::service
