#pragma once
// An operator's transition of one operation (re-trigger, resend approval, force-fail, confirm): the
// guarded write on the row the operator saw, then "tell the actor" (wake it, or spawn it when none
// lives). Operator close is service/end_change (it reads and closes the MR first). Runs on a
// database worker; the HTTP layer only maps the result to an answer.

#include "persistence/operation_repo.hpp"
#include "persistence/session.hpp"
#include "runtime/services.hpp"

#include <cstdint>
#include <string>

namespace changeflow::service {

struct operator_transition {
  std::string operator_name;  // the server-resolved operator (audit, event actor)
  workflow::step to = workflow::step::CREATE_STARTED;
  std::string cause;   // timeline cause
  bool rerun = false;  // re-trigger / resend: run the step again now, with a fresh poll budget
  std::string reason;  // fail / confirm: recorded as last_error "operator: <reason>"
};

enum class transition_status {
  done,       // written; `version` is the row's new version, `actor` what happened to its actor
  preempted,  // the row moved since the operator looked: reload and decide again
  refused,    // the transition table does not allow this edge for an operator
  failed,     // the database could not be written: `error`
};

struct transition_result {
  transition_status status = transition_status::failed;
  std::int64_t version = 0;
  std::string actor;  // "woken" | "spawned" | ... (service/wake_actor)
  persistence::db_error error;
};

/// Writes `t` on `row` guarded by the version and step the operator saw, then wakes the actor.
transition_result apply_operator_transition(persistence::session db, runtime::services& svc,
                                            const persistence::operation_row& row, const operator_transition& t);

}  // namespace changeflow::service
