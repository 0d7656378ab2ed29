#pragma once
// The external calls a request actor makes (effects of the workflow core) and their replies
// (events fed back into it), reduced to what a decision needs. The shell in actors/ maps client
// results onto these; the core never sees HTTP or GitLab types.

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::messages {

// -- external calls (effects) and their replies (events)

enum class call_kind {
  submit_approval,  // approval system: submit (idempotent by requestId = operation_id)
  create_mr,  // GitLab: read the files' bases, branch + commit (idempotent by reading the branch) + MR (409 -> existing)
  read_pipeline,  // GitLab: MR and its head pipeline
  approve_bots,   // GitLab: read MR (merged/closed?) unless a fresh read is known, then approve as each bot on its sha
  try_merge,  // GitLab: read MR unless a fresh read showed it ready, check the target kept the files' bases, merge with
              // sha only when its pipeline ran on that sha
  rebase,     // GitLab: request a rebase
  read_rebase,  // GitLab: MR with include_rebase_in_progress
};

/// What one read of the MR said, and when: the approve and merge steps act on it instead of
/// reading the MR again while it is fresh (gitlab.mr_read_reuse_ms, docs/architecture.md). Kept in the
/// request actor's memory only; after a restart or a takeover there is none and the step reads.
struct mr_read {
  // This process's steady clock (ms since its epoch) just before the GET was sent: the read says
  // how the MR was at least this recently. 0 = no read known.
  std::int64_t read_at_ms = 0;
  std::string state;  // opened | merged | closed | locked
  std::string sha;
  std::string pipeline_status;  // head pipeline ("" = none)
  std::string pipeline_sha;
  std::string detailed_merge_status;
  bool has_conflicts = false;
  std::string base_sha;  // diff_refs.base_sha ("" until GitLab computed it)
  std::string target_branch;

  bool known() const { return read_at_ms != 0; }
};

/// A file as it was in the commit a change's own commit was applied to, as GitLab checked it
/// there: a `create` is refused for a path that exists, an `update` or `delete` for a file whose
/// last commit is not the one it names. So once the commit is made, each path's version at its
/// parent is known without reading it.
struct file_base {
  std::string path;
  std::string last_commit_id;  // "" = the path did not exist there
};

/// What a commit changeflow made was applied to: the commit (its parent), and each path's version
/// there as GitLab checked it (file_base). Kept in memory by whoever made the commit (a request
/// actor, the batch coordinator): while an MR forks at `start_sha`, the check before a merge reads
/// only the target's version of each path. Empty when not known (the commit was made by an earlier
/// attempt, a restart came between).
struct commit_base {
  std::string start_sha;
  std::vector<file_base> files;

  bool known() const { return !start_sha.empty(); }
};

struct call_request {
  call_kind kind;
  std::int64_t mr_iid = 0;
  std::string sha;
  mr_read last_read;  // approve_bots and the first try_merge: the read the step may act on
};

/// The reply of one external call, reduced to what the decision needs.
struct call_reply {
  enum class status {
    ok,
    retryable,   // transport error, 5xx, 429, breaker open: try again later
    refused,     // deterministic refusal (4xx that a retry will not change)
    overloaded,  // the worker pool was full: the call never ran
  };
  call_kind kind;
  status outcome = status::ok;
  std::string error;  // for last_error / logs
  int http_status = 0;
  std::int64_t retry_after_ms = 0;

  // submit_approval
  std::string approval_id;
  // create_mr / read_* / try_merge
  std::int64_t mr_iid = 0;
  std::string mr_url;
  std::string mr_state;  // opened | merged | closed | locked
  std::string sha;
  std::string pipeline_status;  // head pipeline status ("" = none yet)
  std::string pipeline_sha;
  bool rebase_in_progress = false;
  std::string merge_error;
  // The rest of the MR as read (mr_read), and when: set by every call that read the MR or acted on
  // a read it was given; read_at_ms = 0 when the reply carries no read.
  std::string detailed_merge_status;
  bool has_conflicts = false;
  std::string base_sha;
  std::string target_branch;
  std::int64_t read_at_ms = 0;
  // try_merge
  enum class merge_result {
    none,
    merged,
    not_mergeable_yet,
    needs_rebase,
    sha_mismatch,
    pipeline_failed,
    closed,
    already_merged,
    content_conflict,  // the target changed a file of the change since its base: never merged (MR closed)
  };
  merge_result merge = merge_result::none;
  // approve_bots
  bool already_merged = false;
  bool closed = false;
  // create_mr: GitLab refused the commit because a file is not what the change was based on
  bool content_conflict = false;
  // create_mr, when this call made the branch's commit: what it was applied to.
  commit_base own_commit;
};

std::string_view to_string(call_kind k);

/// The MR fields of a reply as one read (read_at_ms = 0 when the reply carries none).
mr_read read_of(const call_reply& r);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, mr_read& x) {
  return f(caf::meta::type_name("mr_read"), x.read_at_ms, x.state, x.sha, x.pipeline_status, x.pipeline_sha,
           x.detailed_merge_status, x.has_conflicts, x.base_sha, x.target_branch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, file_base& x) {
  return f(caf::meta::type_name("file_base"), x.path, x.last_commit_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, commit_base& x) {
  return f(caf::meta::type_name("commit_base"), x.start_sha, x.files);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_request& x) {
  return f(caf::meta::type_name("call_request"), x.kind, x.mr_iid, x.sha, x.last_read);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_reply& x) {
  return f(caf::meta::type_name("call_reply"), x.kind, x.outcome, x.error, x.http_status, x.retry_after_ms,
           x.approval_id, x.mr_iid, x.mr_url, x.mr_state, x.sha, x.pipeline_status, x.pipeline_sha,
           x.rebase_in_progress, x.merge_error, x.detailed_merge_status, x.has_conflicts, x.base_sha, x.target_branch,
           x.read_at_ms, x.merge, x.already_merged, x.closed, x.content_conflict, x.own_commit);
}

}  // namespace changeflow::messages
