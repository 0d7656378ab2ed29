#pragma once
// The batch coordinator's external calls. Everything here that talks to GitLab blocks and
// runs on a thread of the external worker pool, never on an actor thread; `plan_batch` and the
// naming helpers are pure.

#include "clients/external_context.hpp"
#include "config/snapshot.hpp"
#include "messages/external_call.hpp"
#include "workflow/batch_decide.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::effects {

/// One member as the batch MR needs it (read from its operation row).
struct batch_member_change {
  std::string operation_id;
  std::string subject_id;
  std::string title;
  std::string payload_json;  // {"files":[{"path","content","action"?}]}
  std::int64_t created_at_ms = 0;
  int batch_attempts = 0;  // batches this member was claimed into, this one included
};

struct batch_plan {
  std::vector<batch_member_change> included;    // in commit order (oldest first)
  std::vector<std::string> deferred;            // touch a file an earlier member already touches
  std::vector<clients::commit_action> actions;  // ONE commit carrying every included member's files
};

/// Orders members by created_at (stable: ties keep the claim order) and keeps a member only when
/// none of its paths is touched by an earlier included member: one commit cannot carry two
/// versions of one file, and the later change must land on top of the earlier one, so the later
/// member waits for the next round (its waiting row keeps its admission time, so it leads it).
batch_plan plan_batch(std::vector<batch_member_change> members);

std::string batch_branch(std::int64_t batch_id);  // changeflow/batch-<id>
/// "changeflow batch <id>: <title>; <title>; ..." cut at 255 characters (GitLab's limit). Member
/// titles are in the title so a rule matching one member's title matches its batch MR.
std::string batch_title(std::int64_t batch_id, const std::vector<batch_member_change>& members);
/// One `changeflow-operation: <uuid>` line per member (the deploy pipeline reports them back), then
/// the member titles and subjects.
std::string batch_description(std::int64_t batch_id, const std::vector<batch_member_change>& members);

/// The batch MR as a call saw it, and its verdict: the pure core's types (workflow/batch_decide.hpp).
using batch_mr_view = workflow::batch::mr_view;
using batch_verdict = workflow::batch::verdict;
using workflow::batch::classify;

// Every call below goes to the batch's repository (`repo`: a client bound to its project and that
// repository's tokens, clients::external_context::repository); the branch and MR live there.

/// Branch + ONE commit with every action (idempotent: a re-run finds the branch carrying the
/// batch marker) + MR into `target_branch` (409 -> the open MR of the branch). With `own_commit`,
/// what the commit was applied to when this call made it (left as it was when the branch existed).
batch_mr_view open_batch_mr(clients::repository_access& repo, const std::string& target_branch, std::int64_t batch_id,
                            const batch_plan& plan, messages::commit_base* own_commit = nullptr);
batch_mr_view read_batch_mr(clients::repository_access& repo, std::int64_t iid);
/// The open MR of the batch branch (resume after a crash before the MR number was recorded);
/// state "" when there is none.
batch_mr_view find_batch_mr(clients::repository_access& repo, std::int64_t batch_id);

using merge_answer = workflow::batch::merge_answer;
struct merge_attempt {
  merge_answer answer = merge_answer::retryable;
  batch_mr_view mr;
};
/// Checks that the target branch still holds the version of every path in `paths` that the batch
/// commit was based on (content_conflict otherwise, nothing approved or merged), approves as every
/// reviewer bot (approve_as_reviewer, each retried on its own), then merges with the sha the
/// pipeline ran on.
merge_attempt approve_and_merge(clients::repository_access& repo, clients::check_items_cache& check_items,
                                const config::snapshot& snap, std::int64_t iid, const std::vector<std::string>& paths,
                                const messages::commit_base& own_commit = {});
/// Requests a rebase of the batch MR (GitLab answers 202; polling sees the result).
/// Checks first that the target still holds every member file's base (content_conflict otherwise,
/// and no rebase is requested).
batch_mr_view rebase_batch_mr(clients::repository_access& repo, std::int64_t iid, const std::vector<std::string>& paths,
                              const messages::commit_base& own_commit = {});
/// Close the MR if it is still open, then re-read it. The answer's state is the MR's
/// final word ("merged" wins over the close); outcome retryable when it could not be read.
batch_mr_view close_and_reread(clients::repository_access& repo, std::int64_t iid);

}  // namespace changeflow::effects
