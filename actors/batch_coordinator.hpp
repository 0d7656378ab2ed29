#pragma once
// The batch coordinator: one CAF actor per
// instance. A round (timer `batch.round_interval_ms`, or manual) runs the lock-free pre-check, the
// claim transaction (slot, plain read, guarded claim, history), builds ONE MR for the batch (one
// branch, one commit carrying every member's files), polls its pipeline (tiered, with timers),
// approves as both bots, merges with the sha, and settles. Failure: close the MR if open, re-read
// it, merged wins; otherwise the batch fails and its members are requeued in the same transaction
// (guarded write first) — split in two halves when what the members carry may be the cause
// (bisection, bounded by `batch.max_splits`), failed alone when a single member fails its
// pipeline, and BATCH_FAILED once a member was claimed `batch.max_attempts` times.
//
// All blocking work runs on the database pool or the external pool; results come back as
// messages. The actor drives at most one batch at a time; the database guarantees at most one
// active batch across instances (I1), so several coordinators never hold two.

#include "actors/batch_calls.hpp"
#include "actors/services.hpp"
#include "persistence/batch_repo.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::actors {

using batch_round_atom = caf::atom_constant<caf::atom("b_round")>;
using batch_settle_atom = caf::atom_constant<caf::atom("b_settle")>;
using batch_adopt_atom = caf::atom_constant<caf::atom("b_adopt")>;

/// Timer message; `generation` lets the actor ignore timers it has replaced.
struct batch_tick {
  std::uint64_t generation = 0;
  bool poll = false;  // false: scheduled round; true: the driven batch's next poll
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_tick& x) {
  return f(caf::meta::type_name("batch_tick"), x.generation, x.poll);
}

/// Result of a blocking job, sent back to the coordinator (local only).
struct batch_job_result {
  enum class kind {
    round_prepared,
    mr_opened,
    mr_recorded,
    mr_read,
    merged,
    reread,
    settled
  } what = kind::round_prepared;
  std::uint64_t drive = 0;  // which driven batch this belongs to (stale results are ignored)
  // round_prepared: "claimed" | "empty" | "slot_occupied" | "preempted" | "sweep" | "resume" | "error"
  std::string round_outcome;
  std::int64_t batch_id = 0;
  int depth = 0;
  persistence::batch_status status = persistence::batch_status::RUNNING;
  std::vector<batch_member_change> members;
  std::size_t deferred = 0;
  std::optional<std::int64_t> mr_iid;
  batch_mr_view mr;
  merge_answer merge = merge_answer::retryable;
  bool ok = true;          // settled / mr_recorded: the guarded write landed
  bool preempted = false;  // ... or another settler got there first (I6): stop driving
  std::string error;
};

using batch_coordinator = caf::typed_actor<
    /// Manual round: "started" | "slot_occupied" (this instance drives the active batch) | "in_progress".
    caf::replies_to<batch_round_atom>::with<std::string>,
    /// Operator settle of a RUNNING or BLOCKED batch: close the MR, re-read, merged wins, else fail
    /// and requeue. "settling" | "busy" | "not_active".
    caf::replies_to<batch_settle_atom, std::int64_t>::with<std::string>,
    /// Drive this (RUNNING) batch again: after an operator unblocked it.
    caf::reacts_to<batch_adopt_atom, std::int64_t>, caf::reacts_to<batch_tick>, caf::reacts_to<batch_job_result>>;

struct batch_coordinator_options {
  bool scheduled_rounds = true;  // false: manual rounds only (tests)
  bool resume_on_start = true;   // adopt a RUNNING batch found at start (durability)
};

batch_coordinator spawn_batch_coordinator(services& svc, batch_coordinator_options options = {});

// -- the pure decisions (tested without a database)

/// Why a batch failed, set where the failure is seen (typed: the settlement never parses text).
enum class failure_cause {
  pipeline_failed,   // the pipeline failed on the MR's current sha: deterministic
  rebase_conflict,   // a rebase onto the target branch failed with a conflict
  commit_refused,    // GitLab refused the batch branch, commit or MR (4xx)
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
/// target branch, a refused commit) are bisected: requeueing the same members would fail again and
/// would wear out the innocent members' attempts with the culprit's. Everything else (MR closed,
/// refusals of the approve or the merge, timeouts, GitLab down, operator) says nothing about one
/// member: the batch is requeued as is, each member bounded by batch.max_attempts.
failure_plan plan_failure(failure_cause cause, std::size_t members, int depth, int max_splits);

/// requeue_bounded: members claimed `max_attempts` times (or more) leave the batch path.
struct requeue_split {
  std::vector<std::string> requeue;  // wait again
  std::vector<std::string> leave;    // BATCH_FAILED: out of batch attempts
};
requeue_split split_by_attempts(const std::vector<batch_member_change>& members, int max_attempts);

/// Halves in commit order (older half first, so it is claimed first).
std::vector<std::vector<std::string>> halves(const std::vector<batch_member_change>& members);

}  // namespace changeflow::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(changeflow::actors::batch_job_result)
