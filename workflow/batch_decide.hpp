#pragma once
// The batch coordinator's pure core, the batch counterpart of decide(): given the driven batch and
// one event (a call's answer, a write's result, a poll tick), it says what the batch becomes and
// the one thing to do next. No I/O, no clock reads: time is an input. The actor in
// actors/batch_coordinator.cpp is the shell that runs what this decides.
//
// A drive goes: open the MR -> record it -> read it (poll on a timer while its pipeline runs,
// rebase when GitLab asks) -> approve and merge -> settle. Any failure enters the failure path:
// close the MR and read it again (merged wins), then settle by the failure plan.

#include "workflow/pipeline_rule.hpp"
#include "workflow/poll_schedule.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace changeflow::workflow::batch {

/// Where a batch merges: one GitLab repository (project path) and one of its target branches. Each
/// partition has at most one active batch (I1 per partition); partitions batch independently.
struct partition {
  std::string repository;
  std::string target_branch;
  friend bool operator==(const partition& a, const partition& b) {
    return a.repository == b.repository && a.target_branch == b.target_branch;
  }
  friend bool operator!=(const partition& a, const partition& b) { return !(a == b); }
  friend bool operator<(const partition& a, const partition& b) {
    return a.repository != b.repository ? a.repository < b.repository : a.target_branch < b.target_branch;
  }
};
/// "repository@branch", for logs, metrics and the ops view.
std::string to_string(const partition& p);

/// What one coordinator is doing with a partition when a round starts.
enum class partition_activity {
  idle,      // nothing: a claim may start
  claiming,  // its claim (or adoption) job is under way
  driving,   // it drives the partition's batch
};
/// A round's plan: which partitions with waiting changes get a claim now, in a stable order. A
/// partition this coordinator is claiming or driving gets none (one partition never twice), every
/// other one does, so partitions batch in parallel; duplicates are claimed once. Pure, so the
/// round's choice is tested without a database or an actor.
std::vector<partition> partitions_to_claim(const std::vector<partition>& waiting,
                                           const std::vector<std::pair<partition, partition_activity>>& here);

/// Why a batch failed, set where the failure is seen (typed: the settlement never parses text).
enum class failure_cause {
  pipeline_failed,   // the pipeline failed on the MR's current sha: deterministic
  rebase_conflict,   // a rebase onto the target branch failed with a conflict
  commit_refused,    // GitLab refused the batch branch, commit or MR (4xx)
  content_conflict,  // a member's file changed on the target since the member's base: deterministic
  approval_refused,  // a reviewer bot may not approve (4xx)
  merge_refused,     // GitLab refused the merge itself
  mr_closed,         // the MR was closed outside the coordinator
  gitlab_failing,    // GitLab kept failing (5xx, lost answers) past the retry budget
  pipeline_timeout,  // no pipeline verdict within poll.timeout_ms
  swept,             // RUNNING past batch.running_timeout_seconds (crash, hang)
  operator_settled,  // an operator settled the batch
  no_members,        // no member of the claim could be loaded
};
/// What users and operators read in last_error and the timeline ("rebase conflict with the target
/// branch", "MR closed", ...).
std::string_view describe(failure_cause c);

enum class failure_plan {
  bisect,           // several members may hide one culprit, depth below max_splits: two halves wait again
  fail_alone,       // pipeline failed with one member: it failed alone -> BATCH_FAILED
  fail_all,         // pipeline failed, split bound reached: every member BATCH_FAILED
  requeue_bounded,  // every member waits again, except those out of batch attempts: BATCH_FAILED
};
/// Pipeline failures and the failures decided by the files the members carry (a conflict with the
/// target branch, a refused commit, a member's file changed since its base) are bisected: requeueing the same members would fail again and
/// would wear out the innocent members' attempts with the culprit's. Everything else (MR closed,
/// refusals of the approve or the merge, timeouts, GitLab down, operator) says nothing about one
/// member: the batch is requeued as is, each member bounded by batch.max_attempts.
failure_plan plan_failure(failure_cause cause, std::size_t members, int depth, int max_splits);

/// requeue_bounded: members claimed `max_attempts` times (or more) leave the batch path.
struct requeue_split {
  std::vector<std::string> requeue;  // wait again
  std::vector<std::string> leave;    // BATCH_FAILED: out of batch attempts
};
/// `Member` has `operation_id` and `batch_attempts` (the batches it was claimed into, this one included).
template <class Member>
requeue_split split_by_attempts(const std::vector<Member>& members, int max_attempts) {
  requeue_split out;
  for (const auto& m : members) (m.batch_attempts >= max_attempts ? out.leave : out.requeue).push_back(m.operation_id);
  return out;
}
/// Halves in commit order (older half first, so it is claimed first).
template <class Member>
std::vector<std::vector<std::string>> halves(const std::vector<Member>& members) {
  std::vector<std::vector<std::string>> out(2);
  const std::size_t mid = (members.size() + 1) / 2;
  for (std::size_t i = 0; i < members.size(); ++i) out[i < mid ? 0 : 1].push_back(members[i].operation_id);
  if (out[1].empty()) out.pop_back();
  return out;
}

/// The batch MR as a call saw it.
struct mr_view {
  enum class call { ok, retryable, refused } outcome = call::ok;
  std::string error;
  std::int64_t iid = 0;
  std::string web_url;
  std::string state;  // opened | closed | merged | locked | "" (no MR)
  std::string sha;
  std::string pipeline_status;  // of the head pipeline, "" when none
  std::string pipeline_sha;
  std::string detailed_merge_status;
  bool has_conflicts = false;
  bool rebase_in_progress = false;
  std::string merge_error;  // GitLab's word on the last failed rebase or merge; "" when none
  // A refused open, or a rebase not requested: a member's file is not the version it was based on.
  bool content_conflict = false;
};

/// How a read MR stands, decided from the view alone.
enum class verdict {
  merged,           // merged (by us earlier, or by anyone)
  closed,           // closed outside the coordinator
  pipeline_failed,  // head pipeline on the current sha failed/canceled: deterministic
  ready,            // pipeline passed on the current sha: approve and merge
  needs_rebase,     // behind the target or conflicting
  conflict,         // a rebase was tried and failed: the branch conflicts with the target branch
  running,          // keep polling
};
verdict classify(const mr_view& mr);

/// The answer of approve-and-merge.
enum class merge_answer {
  merged,
  not_yet,
  needs_rebase,
  closed,
  approval_refused,
  refused,
  retryable,
  content_conflict,  // the target changed a member's file since the batch commit's base: never merged
};

/// One member as the core needs it.
struct member {
  std::string operation_id;
  int batch_attempts = 0;
};

/// The batch being driven.
struct drive {
  std::int64_t batch_id = 0;
  partition where;  // every call of the drive goes to this repository and target branch
  int depth = 0;
  std::vector<member> members;
  std::int64_t mr_iid = 0;
  int polls = 0;  // of the current pipeline wait
  std::int64_t wait_started_ms = 0;
  int call_failures = 0;               // consecutive failed calls or writes (reset by a success)
  bool settle_requested = false;       // an operator asked to settle while the batch ran
  std::optional<failure_cause> cause;  // set once the failure path started
  std::string failure;                 // its text: describe(cause) and GitLab's detail
};

/// The retry and bound numbers, one place (from the configuration snapshot).
struct settings {
  int max_splits = 6;
  int max_attempts = 3;
  poll_schedule polls;
  int max_call_failures = 8;           // consecutive; past it the batch fails (or is BLOCKED)
  std::int64_t backoff_base_ms = 100;  // doubled per failure ...
  std::int64_t backoff_cap_ms = 5000;  // ... up to this
  std::int64_t settle_retry_ms = 500;  // a settlement write that failed is tried again after this
};
/// Backoff before retry number `failures` (1-based).
std::int64_t backoff_ms(const settings& s, int failures);

/// The one thing to do next.
struct action {
  enum class kind {
    open_mr,    // branch + one commit + MR (idempotent)
    record_mr,  // write the MR number on the batch row
    read_mr,    // read the MR and its head pipeline
    rebase_mr,  // ask GitLab for a rebase
    approve_and_merge,
    close_and_reread,  // failure path: close the MR if open, read it again (mr_iid known)
    find_and_close,    // failure path without a recorded MR: find it on the batch branch, then as above
    settle_merged,     // write success; `text` is the cause
    settle_failed,     // write the failure by `plan`; `text` is the reason
    block,             // write BLOCKED (keeps the slot for an operator); `text` is why
    poll_later,        // run on_poll_tick after `delay_ms`
    end,               // the drive is over; `text` is its outcome for logs and metrics
  } what = kind::end;
  std::int64_t delay_ms = 0;
  std::string text;
  // settle_failed:
  failure_plan plan = failure_plan::requeue_bounded;
  std::vector<std::vector<std::string>> groups;  // bisect: the halves
  requeue_split bounded;                         // requeue_bounded: who waits again, who leaves
  std::string leaving_cause;                     // requeue_bounded: the cause written for leavers
};

struct decision {
  drive next;
  action act;
};

/// Starts driving a freshly claimed batch (or a resumed one): open the MR, or read it when known.
decision begin(drive d, std::int64_t now_ms);
decision on_mr_opened(drive d, const mr_view& mr, const settings& s, std::int64_t now_ms);
/// `preempted`: the batch was settled elsewhere (sweep, operator, another instance).
decision on_mr_recorded(drive d, bool ok, bool preempted);
decision on_mr_read(drive d, const mr_view& mr, const settings& s, std::int64_t now_ms);
decision on_rebase_requested(drive d, const mr_view& mr, const settings& s, std::int64_t now_ms);
decision on_merge(drive d, merge_answer answer, const mr_view& mr, const settings& s, std::int64_t now_ms);
/// Enters the failure path (idempotent: a failure already started keeps its cause).
decision start_failure(drive d, failure_cause cause, const std::string& detail);
/// The failure path's close + re-read answered.
decision on_reread(drive d, const mr_view& mr, const settings& s);
/// A settlement write (merged, failed or blocked) answered; `outcome` is what it wrote.
decision on_settled(drive d, bool ok, bool preempted, const std::string& outcome, const settings& s);
/// A poll timer fired: continue wherever the batch is.
decision on_poll_tick(drive d, const settings& s, std::int64_t now_ms);

}  // namespace changeflow::workflow::batch
