#pragma once
// Ending a change before it is in effect: the requester's cancel and the operator's close are one use
// case with two targets (CANCELLED, CLOSE_SUCCEEDED). The ended step is written with the same version
// guard as every other transition, so a cancel that races a callback, a merge or the actor itself
// resolves the way every other race does: the loser re-reads and decides again.
//
//   load row ──> plan (pure) ──> [MR: read it, close it] ──> guarded write ──> [withdraw approval] ──> answer
//      ^                                                           │ preempted
//      └─────────────────────── re-read (bounded) ─────────────────┘
//
// Order matters. The MR is read and closed BEFORE the write: a merge that landed first must win
// (merged wins: recorded as HANDLE_ALREADY_MERGED, the answer says so), and only a read can tell. The
// approval request is withdrawn AFTER the write: the approval system answers a withdrawal with a
// WITHDRAWN callback, which must find the change already ended (stale) rather than race the write.
// A change that already merged is never "cancelled" — it is in effect, or about to be.

#include "runtime/services.hpp"
#include "workflow/status.hpp"
#include "workflow/transitions.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::service {

enum class end_kind { cancel, close };

struct end_request {
  end_kind kind = end_kind::cancel;
  std::string operation_id;
  workflow::actor_kind by = workflow::actor_kind::requester;
  std::string actor;                             // timeline label: "user:<id>" | "operator:<name>"
  std::string reason;                            // optional, recorded as last_error and in the cause
  std::optional<std::int64_t> expected_version;  // refuse when the row moved since the caller looked
};

enum class end_status {
  ended,          // this call wrote the ended step
  already_ended,  // the change had already ended the same way (a repeat): nothing written
  merged_wins,    // the MR merged (before or during the call): recorded as merged, not ended
  not_allowed,    // the change is past the point where it can end this way (message says why)
  stale,          // expected_version did not match, or the row kept moving under us
  not_found,
  unavailable,  // the database or an external system could not be reached: retry later
  overloaded,   // a worker pool was full: retry later
};

struct end_result {
  end_status status = end_status::unavailable;
  std::string message;  // for the client
  workflow::step from = workflow::step::APPROVAL_SENDING;
  workflow::step to = workflow::step::APPROVAL_SENDING;
  std::int64_t version = 0;
  bool written = false;                // this call committed a transition (ended, or merged wins recorded)
  std::vector<std::string> withdrawn;  // what was withdrawn remotely, in words
  std::string detail;                  // for the log only (may name internal errors)
};

/// What a remote cleanup must do before the ended step is written. Pure.
struct end_plan {
  std::optional<workflow::step> target;  // nullopt: refused (see status/message)
  end_status refusal = end_status::not_allowed;
  std::string message;
  bool withdraw_approval = false;  // an approval request may still be pending: withdraw it after the write
  bool read_mr = false;            // an MR exists and may still be open (close it, or find it merged)
};
end_plan plan_end(end_kind kind, workflow::step current, workflow::actor_kind by, bool has_approval_id, bool has_mr);

/// Runs the use case across the database and external pools; `done` is called exactly once, from a
/// worker thread.
void end_change(runtime::services& svc, end_request req, std::function<void(end_result)> done);

}  // namespace changeflow::service
