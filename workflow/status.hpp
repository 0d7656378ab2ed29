#pragma once
// The workflow vocabulary: fine-grained step status (numeric, in ranges by phase) and the coarse
// binding phase users see. Seeds MR-lifecycle 3.1: troubleshooting needs the exact step; users and
// the "can I re-apply" decision only need the phase.
//
// Every step belongs to exactly one phase (phase_of), so a transition names only its target step and
// the binding phase follows; the operation row and the binding row are written in one transaction.

#include <array>
#include <optional>
#include <string_view>

namespace changeflow::workflow {

enum class phase {
  APPROVAL_SENDING,
  APPROVAL_SENT,
  MR_CREATING,
  MR_CREATED,
  MERGING,
  MERGED,
  VALIDATED,
  CREATE_FAILED,
  HANDLE_FAILED,
  REJECTED,
  CLOSED,
  CANCELLED,
};

// Ranges: creation 10001.., handling 10101.., closing 10201.., callback 10301..,
// pipeline pending 10501.., batch 10601... Metrics aggregate by prefix (code / 100).
enum class step : int {
  // -- creation: approval submission and MR creation
  CREATE_STARTED = 10001,          // MR_CREATING: branch + commit + MR being created
  CREATE_SUCCEEDED = 10002,        // MR_CREATED: check pipeline passed
  CREATE_MR_OPENED = 10003,        // MR_CREATING: MR exists, waiting for its check pipeline
  CREATE_PIPELINE_FAILED = 10004,  // CREATE_FAILED: check pipeline failed (deterministic)
  CREATE_ERROR = 10005,            // CREATE_FAILED: unexpected error in a creation step
  CREATE_OVERLOADED = 10006,       // CREATE_FAILED: worker pool full when the step was started
  CREATE_GITLAB_REFUSED = 10007,   // CREATE_FAILED: GitLab refused commit/MR (4xx, deterministic)
  // CREATE_FAILED (deterministic): a file of the change is not what the change was based on (GitLab
  // refused the commit's last_commit_id, or the target changed the file before the merge). The
  // change was never committed over the newer version; its user rebases and submits again.
  CONTENT_CONFLICT = 10008,
  APPROVAL_SENDING = 10011,        // APPROVAL_SENDING: written before the approval call
  APPROVAL_SENT = 10012,           // APPROVAL_SENT: approval system acknowledged
  APPROVAL_REJECTED = 10013,       // REJECTED
  APPROVAL_WITHDRAWN = 10014,      // REJECTED
  APPROVAL_SUBMIT_FAILED = 10015,  // CREATE_FAILED: approval system refused the submission
  APPROVAL_TIMEOUT = 10016,        // CLOSED: no decision within the deadline (re-apply allowed)
  APPROVAL_APPROVED = 10017,       // MR_CREATING (new order) : approval granted, MR next
  // -- handling: bot approval, merge, rebase
  HANDLE_STARTED = 10101,          // MERGING
  HANDLE_APPROVED = 10102,         // MERGING: both bots approved
  HANDLE_MERGING = 10103,          // MERGING: merge call in progress
  HANDLE_REBASING = 10104,         // MERGING: rebase requested, polling rebase_in_progress
  HANDLE_REBASE_CONFLICT = 10105,  // HANDLE_FAILED (deterministic)
  HANDLE_APPROVAL_FAILED = 10106,  // HANDLE_FAILED: a bot may not approve (401/403 settled)
  HANDLE_MERGE_FAILED = 10107,     // HANDLE_FAILED: merge refused after bounded attempts
  HANDLE_MERGED = 10108,           // MERGED
  HANDLE_ALREADY_MERGED = 10109,   // MERGED: merged by someone else; no approval was attempted
  HANDLE_MR_CLOSED = 10110,        // HANDLE_FAILED: MR closed outside changeflow (deterministic)
  HANDLE_PIPELINE_FAILED = 10111,  // HANDLE_FAILED: pipeline after a rebase failed (deterministic)
  HANDLE_ERROR = 10112,            // HANDLE_FAILED: unexpected error in a handling step
  HANDLE_OVERLOADED = 10113,       // HANDLE_FAILED: worker pool full when the step was started
  // -- closing
  CLOSE_SUCCEEDED = 10201,  // CLOSED: an operator closed the change (and its MR, if open)
  FORCED_FAILED = 10202,    // HANDLE_FAILED: an operator forced a failure (close frees the target)
  CANCELLED = 10203,        // CANCELLED: the requester (or an operator) cancelled the change
  // -- callback
  CALLED_BACK = 10301,     // VALIDATED: deploy callback (or reconciliation) confirmed
  DEPLOY_TIMEOUT = 10302,  // MERGED: no deploy confirmation within the deadline (ask maintainers)
  DEPLOY_FAILED = 10303,   // HANDLE_FAILED: the deploy pipeline reported failure for the merged MR
  // -- pipeline pending: outcome unknown after polling timed out; phase kept, a human confirms
  HANDLE_PIPELINE_PENDING = 10501,  // MERGING
  CREATE_PIPELINE_PENDING = 10502,  // MR_CREATING
  REBASE_PENDING = 10503,           // MERGING: rebase never finished within the poll budget
  // -- batch path
  BATCH_WAITING = 10601,  // MR_CREATED: admitted to the waiting set
  BATCH_CLAIMED = 10602,  // MERGING: claimed by a batch; the batch MR carries it
  BATCH_FAILED = 10603,   // HANDLE_FAILED: failed alone after bisection, or out of batch attempts
  BATCH_MERGED = 10604,   // MERGED: the batch MR merged
};

inline constexpr std::array all_phases = {
    phase::APPROVAL_SENDING, phase::APPROVAL_SENT, phase::MR_CREATING, phase::MR_CREATED,
    phase::MERGING,          phase::MERGED,        phase::VALIDATED,   phase::CREATE_FAILED,
    phase::HANDLE_FAILED,    phase::REJECTED,      phase::CLOSED,      phase::CANCELLED,
};

inline constexpr std::array all_steps = {
    step::CREATE_STARTED,
    step::CREATE_SUCCEEDED,
    step::CREATE_MR_OPENED,
    step::CREATE_PIPELINE_FAILED,
    step::CREATE_ERROR,
    step::CREATE_OVERLOADED,
    step::CREATE_GITLAB_REFUSED,
    step::CONTENT_CONFLICT,
    step::APPROVAL_SENDING,
    step::APPROVAL_SENT,
    step::APPROVAL_REJECTED,
    step::APPROVAL_WITHDRAWN,
    step::APPROVAL_SUBMIT_FAILED,
    step::APPROVAL_TIMEOUT,
    step::APPROVAL_APPROVED,
    step::HANDLE_STARTED,
    step::HANDLE_APPROVED,
    step::HANDLE_MERGING,
    step::HANDLE_REBASING,
    step::HANDLE_REBASE_CONFLICT,
    step::HANDLE_APPROVAL_FAILED,
    step::HANDLE_MERGE_FAILED,
    step::HANDLE_MERGED,
    step::HANDLE_ALREADY_MERGED,
    step::HANDLE_MR_CLOSED,
    step::HANDLE_PIPELINE_FAILED,
    step::HANDLE_ERROR,
    step::HANDLE_OVERLOADED,
    step::CLOSE_SUCCEEDED,
    step::FORCED_FAILED,
    step::CANCELLED,
    step::CALLED_BACK,
    step::DEPLOY_TIMEOUT,
    step::DEPLOY_FAILED,
    step::HANDLE_PIPELINE_PENDING,
    step::CREATE_PIPELINE_PENDING,
    step::REBASE_PENDING,
    step::BATCH_WAITING,
    step::BATCH_CLAIMED,
    step::BATCH_FAILED,
    step::BATCH_MERGED,
};

phase phase_of(step s);
std::string_view to_string(phase p);
std::string_view to_string(step s);
std::optional<phase> parse_phase(std::string_view name);
std::optional<step> parse_step(std::string_view name);
std::optional<step> step_from_code(int code);
inline int code_of(step s) {
  return static_cast<int>(s);
}

/// Single source of truth for "has the target's current change ended, so a new one may start":
/// both the data layer (binding reset) and the API use it. A target is changed many times over its
/// life, one change in flight at a time; failures that await an operator still block it.
bool is_reappliable(phase p);  // {VALIDATED, REJECTED, CLOSED, CANCELLED}
/// The callback guard's waiting set: the callback can arrive before SENT is written.
bool is_awaiting_approval(phase p);  // {APPROVAL_SENDING, APPROVAL_SENT}
/// No actor lives for an operation in a terminal phase (failures await an operator, not a timer).
bool is_terminal(phase p);  // {VALIDATED, CREATE_FAILED, HANDLE_FAILED, REJECTED, CLOSED, CANCELLED}
/// Deterministic failures: retrying with the same MR fails again -> hint CONTACT_MAINTAINERS.
/// Everything else that stopped is unknown/transient -> hint KEEP_WAITING.
bool is_deterministic_failure(step s);

/// What the API tells a user to do next.
enum class hint { KEEP_WAITING, CONTACT_MAINTAINERS, DONE, REAPPLY_ALLOWED, REBASE_AND_RESUBMIT };
std::string_view to_string(hint h);
/// The hint in words, for the status document.
std::string_view describe(hint h);
hint hint_for(phase p, step s);

enum class flow { approve_then_create, create_then_approve };
std::string_view to_string(flow f);
std::optional<flow> parse_flow(std::string_view name);

}  // namespace changeflow::workflow
