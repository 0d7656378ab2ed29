#pragma once
// An operator's action on one operation (re-trigger, resend approval, confirm, force-fail, close),
// and the bulk re-trigger / force-fail over a filter. Here, once: the idempotency protocol, the plan
// from the transition table (workflow/operator_plan), the guarded write (service/operator_transition)
// or the close (service/end_change), and an audit entry for every outcome, refusals included. The
// HTTP layer parses the request and renders the result; it writes nothing itself.

#include "persistence/ops_repo.hpp"
#include "persistence/session.hpp"
#include "runtime/services.hpp"
#include "service/idempotency.hpp"
#include "workflow/operator_plan.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::service {

struct operator_action {
  workflow::ops_action action = workflow::ops_action::retrigger;
  std::string operation_id;
  std::string operator_name;    // the server-resolved operator
  nlohmann::json audit_params;  // the request in audit form (server identity written over, masked)
  std::string reason;           // fail / close reason
  std::optional<std::int64_t> expected_version;
  idempotent_request idem;  // key "" = none
};

enum class action_status {
  done,            // written: `from` -> `to` at `version` (a close that found the MR merged: merged_wins)
  not_found,       // no such operation
  stale,           // the operator's expectedVersion is not the row's version any more
  refused,         // the action does not apply at this step: `message`
  preempted,       // the row moved during the write: reload and decide again
  already_merged,  // close refused: the MR merged (merged wins), nothing written
  overloaded,      // a worker pool was full
  unavailable,     // an external system or the database could not be reached: `message`, `detail`
  failed,          // the database failed: `error`
};

struct action_result {
  action_status status = action_status::failed;
  std::string message;  // for the client (refusals)
  workflow::step from = workflow::step::APPROVAL_SENDING;
  workflow::step to = workflow::step::APPROVAL_SENDING;
  std::int64_t version = 0;
  std::string actor;                   // transitions: what happened to the live actor ("woken", "spawned", ...)
  bool merged_wins = false;            // close: the MR had merged, so the change was recorded as merged
  std::vector<std::string> withdrawn;  // close: what was withdrawn remotely, in words
  persistence::db_error error;         // failed
  std::string detail;                  // for the log only
};

/// The audit outcome recorded for a result ("OK", "STALE", "REFUSED", ...).
std::string audit_outcome(const action_result& r);

/// Turns a result into the wire answer; called exactly once per action that ran. A 2xx answer is
/// stored for replay under the action's idempotency key.
using action_render = std::function<stored_answer(const action_result&)>;
/// Called exactly once when the action is over: with the gate's answer when the idempotency gate did
/// not let it run (replay, 409, 422, database failure), else with nullptr (render has run).
using action_done = std::function<void(const gate_result* not_run)>;

/// Runs `a` on a database worker (`db`); a close continues on the external and database pools.
void run_operator_action(persistence::session db, runtime::services& svc, operator_action a, action_render render,
                         action_done done);

struct bulk_action {
  workflow::ops_action action = workflow::ops_action::retrigger;  // retrigger | fail
  persistence::ops_operation_filter filter;
  bool dry_run = true;
  std::string reason;
  std::string operator_name;
  nlohmann::json audit_params;
};

struct bulk_result {
  bool ok = false;  // false: `error`
  persistence::db_error error;
  std::size_t matched = 0;
  std::size_t eligible = 0;
  bool capped = false;                  // more rows matched than one bulk action takes
  std::vector<std::string> sample_ids;  // the first eligible ids (at most 100)
  std::map<std::string, int> outcomes;  // audit outcome -> count (not a dry run)
};

/// At most this many rows are looked at by one bulk action.
inline constexpr int bulk_cap = 500;

/// Counts (dry run) or applies a bulk action, one guarded transition per eligible row, each audited,
/// plus one audit entry for the bulk action itself. Runs on a database worker.
bulk_result run_bulk_action(persistence::session db, runtime::services& svc, const bulk_action& b);

}  // namespace changeflow::service
