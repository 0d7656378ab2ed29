#pragma once
// The external calls a request actor makes (effects of the workflow core) and their replies
// (events fed back into it), reduced to what a decision needs. The shell in actors/ maps client
// results onto these; the core never sees HTTP or GitLab types.

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace changeflow::messages {

// -- external calls (effects) and their replies (events)

enum class call_kind {
  submit_approval,  // approval system: submit (idempotent by requestId = operation_id)
  create_mr,  // GitLab: read the files' bases, branch + commit (idempotent by reading the branch) + MR (409 -> existing)
  read_pipeline,  // GitLab: MR and its head pipeline
  approve_bots,   // GitLab: read MR (merged/closed?), then approve as each bot
  try_merge,  // GitLab: read MR, check the target kept the files' bases, merge with sha only when its pipeline ran on that sha
  rebase,       // GitLab: request a rebase
  read_rebase,  // GitLab: MR with include_rebase_in_progress
};

struct call_request {
  call_kind kind;
  std::int64_t mr_iid = 0;
  std::string sha;
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
};

std::string_view to_string(call_kind k);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_request& x) {
  return f(caf::meta::type_name("call_request"), x.kind, x.mr_iid, x.sha);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_reply& x) {
  return f(caf::meta::type_name("call_reply"), x.kind, x.outcome, x.error, x.http_status, x.retry_after_ms,
           x.approval_id, x.mr_iid, x.mr_url, x.mr_state, x.sha, x.pipeline_status, x.pipeline_sha,
           x.rebase_in_progress, x.merge_error, x.merge, x.already_merged, x.closed, x.content_conflict);
}

}  // namespace changeflow::messages
