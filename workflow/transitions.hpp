#pragma once
// The central transition table: which step may follow which. Every write path checks it before any
// SQL runs (persistence refuses an illegal transition as an error value, never a write), and the
// console shows the actions a state allows from it.
//
// Main path, new order (approve_then_create):
//
//   (submit) -> APPROVAL_SENDING -> APPROVAL_SENT -> APPROVAL_APPROVED -> CREATE_STARTED
//            -> CREATE_MR_OPENED -> CREATE_SUCCEEDED -> HANDLE_APPROVED
//            -> HANDLE_MERGING <-> HANDLE_REBASING -> HANDLE_MERGED -> CALLED_BACK
//
// (The bots approve from CREATE_SUCCEEDED itself; HANDLE_STARTED is the legacy order's handling
// step and an operator's re-trigger.)
//
// Legacy order (create_then_approve): CREATE_* first, then CREATE_SUCCEEDED -> APPROVAL_SENDING
// -> ... -> APPROVAL_APPROVED -> HANDLE_STARTED.  Batch path: APPROVAL_APPROVED -> BATCH_WAITING
// -> BATCH_CLAIMED -> BATCH_MERGED -> CALLED_BACK (a failed batch puts BATCH_CLAIMED back to
// BATCH_WAITING, or to BATCH_FAILED once a member fails alone).
//
// Ways out: every step that has not ended (VALIDATED, REJECTED, CLOSED, CANCELLED) can reach one
// that has, so no change can block its target for ever: the requester may cancel anything not yet
// merged, and operators may close every failure (including a forced one and a failed deploy).

#include "workflow/status.hpp"

#include <optional>
#include <span>
#include <vector>

namespace changeflow::workflow {

/// Who may take an edge, in increasing rank: the workflow itself; the change's requester (cancel, and
/// recording "merged wins" when a cancel finds the MR merged); only an operator (re-trigger,
/// force-fail, close, confirm). A higher rank may take every edge of a lower one.
enum class actor_kind { workflow, requester, operator_only };

struct transition_rule {
  step from;
  step to;
  actor_kind by = actor_kind::workflow;
};

/// Every allowed edge, workflow and operator ones.
const std::vector<transition_rule>& transition_table();

/// Steps a new operation may start in.
bool is_initial_step(step s);  // APPROVAL_SENDING (new order), CREATE_STARTED (legacy order)

/// True when `from -> to` is in the table for this kind of actor (operators may take every edge).
bool is_allowed(step from, step to, actor_kind by = actor_kind::workflow);

/// Targets reachable from `from` by the given kind of actor.
std::vector<step> allowed_targets(step from, actor_kind by);

}  // namespace changeflow::workflow
