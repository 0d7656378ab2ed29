#pragma once
// Reverting a VALIDATED change: a NEW change (same subject, target, repository and target branch,
// title "Revert: <title>") with its own approval, MR and lifecycle, whose files put back what the
// original replaced. The content to put back is each file at the original's base, the commit its
// MR's branch forked from (`diff_refs.base_sha`); a file the original created is deleted. Every
// update and delete is based on (pinned to) the file's current last commit on the target, so an
// edit that lands after the revert was asked for ends the revert CONTENT_CONFLICT instead of being
// overwritten.
//
//   [idempotency gate] ─> load + check the original (pure rule) ─> GitLab: the MR's fork point, each
//   file there and on the target ─> the revert's files (pure) ─> ONE transaction: create the revert,
//   link the original ─> start its actor ─> answer (a 2xx is stored for replay)
//
// Nothing is written unless every read succeeded: a GitLab that cannot be read answers
// `unavailable` (503) and the idempotency record is dropped, so a retry runs afresh.

#include "clients/gitlab_client.hpp"
#include "persistence/operation_repo.hpp"
#include "runtime/services.hpp"
#include "service/idempotency.hpp"
#include "service/submit.hpp"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::service {

struct revert_request {
  std::string original_id;
  /// The revert's own row as a submission would start it: id (the client's, derived from the key,
  /// or fresh), flow and initial step, owner, requester and actor. The use case fills in subject,
  /// target, repository, target branch, title, files and revert_of from the original.
  persistence::new_operation revert;
  idempotent_request idem;  // key "": not deduplicated beyond the revert's id
};

enum class revert_status {
  created,            // the creation ran: `submitted` says what it answered (accepted, duplicate, blocked, failed)
  not_found,          // no such change
  not_validated,      // only a VALIDATED change can be reverted (`message` names its step)
  already_reverted,   // its current revert is in flight or took effect: `current_revert`
  nothing_to_revert,  // the target's files already hold what the change replaced, or it has no MR to read
  not_configured,     // the change's repository or target branch is no longer configured: no new change goes there
  unavailable,        // GitLab could not be read: nothing written, retry after `retry_after_s`
  overloaded,         // a worker pool was full: nothing written
  failed,             // the database failed: `error`
};

struct revert_result {
  revert_status status = revert_status::failed;
  std::string message;         // for the client
  submit_result submitted;     // created
  std::string current_revert;  // already_reverted
  int retry_after_s = 0;       // unavailable
  persistence::db_error error;
  std::string detail;  // for the log only
};

/// One file of the original: as it was at the original's base and as the target holds it now.
struct file_versions {
  std::string path;
  std::optional<clients::repository_file> at_base;    // nullopt: the original created it
  std::optional<clients::repository_file> on_target;  // nullopt: the target has no such file now
};

/// The revert's files, in the original's order (pure). Each file goes back to its content at the
/// base: updated (or created, when the target lost it) with that content, deleted when the base
/// had none. Updates and deletes carry the target's current last commit of the file. A file the
/// target already holds as it was at the base is left out.
std::vector<clients::commit_action> revert_actions(const std::vector<file_versions>& files);

/// "Revert: <title>".
std::string revert_title(std::string_view original_title);

/// Turns a result into the wire answer (called once per revert that ran); a 2xx answer is stored
/// for replay under the key.
using revert_render = std::function<stored_answer(const revert_result&)>;

/// Runs the use case across the database and external pools. `done` is called exactly once, from a
/// worker thread, after `render` (when the revert ran) and after its answer was stored: with the
/// gate's answer when the idempotency gate did not let it run, else nullopt.
void revert_change(runtime::services& svc, revert_request req, revert_render render,
                   std::function<void(std::optional<gate_result>)> done);

}  // namespace changeflow::service
