#pragma once
// A change's files as GitLab commit actions, written safely: updates and deletes carry the last
// commit the change is based on, `upsert` becomes create or update from what the branch holds, and
// a merge first checks that the target branch has not changed the change's files since the MR's
// branch forked from it. Blocking GitLab reads: runs on the external worker pool only.

#include "clients/gitlab_client.hpp"
#include "messages/external_call.hpp"

#include <string>
#include <vector>

namespace changeflow::effects {

/// The stored payload's files ({"files":[{path, content, action, lastCommitId?}]}) as commit
/// actions; `upsert` (and a missing action) is kept as "upsert" for resolve_actions.
std::vector<clients::commit_action> commit_actions_of(const std::string& payload_json);
/// The stored payload of a change's files, the format commit_actions_of reads (lastCommitId only
/// when the action has one).
std::string payload_of(const std::vector<clients::commit_action>& actions);

/// Makes the actions safe to commit onto `ref` (the branch the commit starts from):
///  - upsert -> update when `ref` holds the file, else create;
///  - update/delete without a base -> the file's last commit on `ref` becomes the base.
/// Reading `ref` right before the commit is the change's base capture: this is its first GitLab
/// contact. Reads only the files that need it.
clients::result<std::vector<clients::commit_action>> resolve_actions(clients::gitlab_client& gitlab,
                                                                     const std::string& token, const std::string& ref,
                                                                     std::vector<clients::commit_action> actions);

/// GitLab refused a commit because a file is not what the change was based on: changed since its
/// base (last_commit_id), created meanwhile (create of an existing file) or deleted meanwhile
/// (update/delete of a missing one).
bool is_content_conflict(const clients::call_error& e);

struct content_check {
  std::vector<std::string> changed;  // paths the target changed since the fork; empty = unchanged
  std::string describe() const;      // "the file changed since your change was based on it: a.yaml, b.yaml"
};
/// Compares every path on `target_branch` with the MR's fork point `base_sha` (diff_refs.base_sha):
/// a path whose existence or last commit differs was changed on the target after the change's
/// commit was based on it. Run right before a merge and before a rebase, so neither ever carries a
/// change over a newer version of its file. A path in `known_at_base` has its version at
/// `base_sha` known (the change's own commit was applied there, base_of): only its version
/// on the target is read.
clients::result<content_check> check_unchanged_since(clients::gitlab_client& gitlab, const std::string& token,
                                                     const std::string& target_branch, const std::string& base_sha,
                                                     const std::vector<std::string>& paths,
                                                     const std::vector<messages::file_base>& known_at_base = {});

/// What changeflow's own commit was applied to (`commit.parent`), when this call made the commit
/// (`commit.created`; empty otherwise: an earlier attempt made it), with each path's version there
/// as GitLab checked it before it accepted the commit: a `create` only where the path did not exist,
/// an `update` or `delete` naming a last commit only where the file's last commit was that one. A
/// path's first action says it; a path whose first action names no base is left out.
messages::commit_base base_of(const clients::branch_commit& commit, const std::vector<clients::commit_action>& actions);

/// What `own` says of the files at an MR's fork point `fork_sha`: its files while the MR forks at
/// the commit changeflow's own commit was applied to, nothing otherwise (then both are read).
const std::vector<messages::file_base>& known_at(const messages::commit_base& own, const std::string& fork_sha);

/// The paths of a set of actions, each once.
std::vector<std::string> paths_of(const std::vector<clients::commit_action>& actions);

/// What users are told when a change's files moved under it.
inline constexpr const char* content_conflict_hint =
    "the file changed since your change was based on it: rebase your change and submit again";

}  // namespace changeflow::effects
