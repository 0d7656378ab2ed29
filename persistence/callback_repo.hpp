#pragma once
// Callback ledger and deploy callbacks. Deliveries are at-least-once: the UNIQUE delivery id turns
// a redelivery into an answer (DUPLICATE), and the approval guard accepts
// an event only for the operation that currently owns the binding and is currently waiting.

#include "persistence/operation_repo.hpp"
#include "persistence/result.hpp"
#include "persistence/session.hpp"
#include "workflow/status.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::persistence {

enum class callback_kind { approval, deploy, gitlab };
/// ID_REUSED: the delivery id was seen before for another operation (an approval system that
/// restarted and reissued ids): refused loudly and recorded for that operation, never taken for a
/// duplicate of the first one.
enum class callback_outcome { APPLIED, DUPLICATE, IGNORED_STALE, OUT_OF_ORDER, PENDING, ID_REUSED };
std::string_view to_string(callback_kind k);
std::string_view to_string(callback_outcome o);

/// duplicate_unapplied: the delivery was recorded before but its outcome is still PENDING — the
/// process that recorded it died before applying it (or is applying it right now); the redelivery
/// applies it, because applying is idempotent (guarded writes, flip-once validation).
enum class record_outcome { inserted, duplicate, duplicate_unapplied };

enum class approval_result { APPROVED, REJECTED, WITHDRAWN };

struct approval_applied {
  callback_outcome outcome = callback_outcome::IGNORED_STALE;
  /// Set when APPLIED: the step and version the delivery's transaction left (CREATE_STARTED and two
  /// versions on when it went on in the workflow's place, approved_then_create).
  std::optional<workflow::step> new_step;
  std::optional<std::int64_t> new_version;
  /// The operation's row read right after the commit, when APPLIED by the one-text unit (the same
  /// round trip): what starts an actor for it without another read.
  std::optional<operation_row> row;
  /// The version the delivery's transaction found, when known (APPLIED by the one-text unit): an
  /// actor that holds it takes new_step and new_version as read.
  std::optional<std::int64_t> found_version;
};

/// What the owner's workflow does at once after an APPROVED decision when nothing else decides it
/// (the operation has no MR yet and batching is off): write CREATE_STARTED and start creating the
/// MR. Given, the decision's own transaction writes that step too, as the workflow of `instance_id`
/// and only on a row that instance owns, with the event the workflow writes: one commit where the
/// decision and the actor's step took two, and the same timeline.
struct approved_then_create {
  std::string instance_id;
};

/// One transaction: ledger insert (duplicate -> DUPLICATE, nothing else), lock operation then
/// binding, no binding for this operation -> IGNORED_STALE (a re-apply replaced it); binding not
/// awaiting approval -> OUT_OF_ORDER when an approval decision already took effect, IGNORED_STALE
/// otherwise; else the guarded transition to APPROVAL_APPROVED / _REJECTED / _WITHDRAWN (actor
/// 'callback'). The ledger row records the outcome in the same transaction.
/// With `then` (an APPROVED decision only), the one-text unit also writes CREATE_STARTED when the
/// rules of approved_then_create hold; the locked path that answers the rare rest writes the
/// decision only, and the actor goes on from there.
db_result<approval_applied> apply_approval_callback(session s, const std::string& delivery_id,
                                                    const std::string& operation_id, approval_result result,
                                                    const std::string& payload_json,
                                                    const std::optional<approved_then_create>& then = std::nullopt);

/// apply_approval_callback as a unit that joins a transition group (transition_committer::
/// submit_unit): in the group it flips the operation when it awaits this decision and records the
/// delivery as APPLIED, in the group's one commit. Every other case (a copy, an id reused, an
/// operation not awaiting approval) and a group that failed are answered by apply_approval_callback,
/// run alone right after the group. `done` gets what apply_approval_callback would answer.
std::shared_ptr<group_unit> approval_callback_unit(
    const std::string& delivery_id, const std::string& operation_id, approval_result result,
    const std::string& payload_json, std::function<void(db_context&, const db_result<approval_applied>&)> done,
    const std::optional<approved_then_create>& then = std::nullopt);

struct deploy_callback_in {
  std::string delivery_id;
  std::string project;
  std::int64_t mr_iid = 0;
  std::optional<std::int64_t> pipeline_id;
  std::string status;                             // as sent by the deploy pipeline, e.g. "success"
  std::optional<std::string> operation_ids_json;  // JSON array when the sender knows them
};

// -- GitLab's own webhooks (Pipeline and Merge Request Hooks; Deployment Hooks go through the
// deploy delivery above)

/// A merge event's MR and the commit it merged as, kept so a Deployment Hook (which names only the
/// deployed commit) finds its MR.
struct merge_commit {
  std::string project;
  std::string sha;
  std::int64_t mr_iid = 0;
};

/// One transaction: the ledger row (kind gitlab, key "gitlab:<delivery_id>", PENDING) and, for a
/// merge event, the merge commit. A repeated delivery id writes nothing: `duplicate`, or
/// `duplicate_unapplied` while the first copy's outcome is still PENDING.
db_result<record_outcome> record_gitlab_delivery(session s, const std::string& delivery_id,
                                                 const std::string& payload_json,
                                                 const std::optional<merge_commit>& merged);

/// The classified outcome on a gitlab ledger row (the first classification wins).
db_result<done> set_gitlab_outcome(session s, const std::string& delivery_id, std::string_view outcome,
                                   const std::vector<std::string>& operation_ids = {});

/// The classified outcome on a PENDING ledger row (only the first classification counts) and, in the
/// same transaction, the operations the delivery was routed to (callback_operation), so the change
/// page lists every delivery that concerned the change.
db_result<done> set_ledger_outcome(session s, const std::string& ledger_key, std::string_view outcome,
                                   const std::vector<std::string>& operation_ids);

/// The MR a merge event recorded for `sha` in `project` (a full sha, or a prefix of at least 8
/// hex digits as GitLab's `short_sha`); nullopt when none was recorded or the prefix is ambiguous.
db_result<std::optional<std::int64_t>> mr_of_merge_commit(session s, const std::string& project,
                                                          const std::string& sha);

}  // namespace changeflow::persistence
