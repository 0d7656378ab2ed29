#pragma once
// The batch coordinator: one CAF actor per instance, the shell over the pure batch core
// (workflow/batch_decide.hpp), which decides every step of a drive. A round (timer `batch.round_interval_ms`, or manual) runs the lock-free pre-check, the
// claim transaction (slot, plain read, guarded claim, history), builds ONE MR for the batch (one
// branch, one commit carrying every member's files), polls its pipeline (tiered, with timers),
// approves as both bots, merges with the sha, and settles. Failure: close the MR if open, re-read
// it, merged wins; otherwise the batch fails and its members are requeued in the same transaction
// (guarded write first) — split in two halves when what the members carry may be the cause
// (bisection, bounded by `batch.max_splits`), failed alone when a single member fails its
// pipeline, and BATCH_FAILED once a member was claimed `batch.max_attempts` times.
//
// Batches are partitioned by (repository, target branch): each partition has its own active slot
// (I1 per partition, a UNIQUE key in the database), and the coordinator drives the partitions in
// parallel, at most one batch per partition. A round lists the partitions with waiting changes and
// claims in every partition this coordinator neither claims nor drives
// (workflow::batch::partitions_to_claim); several coordinators never hold two batches of one
// partition because the database refuses the second slot.
//
// Each active batch has an owner (merge_batch.owner_instance): the instance that claimed it. A
// coordinator drives only the batches its instance owns; at start and in every round it takes over
// those of instances whose lease expired (persistence::own_active_batches), so a batch whose driver
// died is resumed by one peer, and a restarted instance never adopts a batch a live peer drives.
//
// All blocking work runs on the database pool or the external pool; results come back as
// messages.

#include "effects/batch_calls.hpp"
#include "persistence/batch_repo.hpp"
#include "runtime/services.hpp"

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
using batch_webhook_atom = caf::atom_constant<caf::atom("b_webhook")>;

/// Timer message; `generation` lets the actor ignore timers it has replaced.
struct batch_tick {
  std::uint64_t generation = 0;
  bool poll = false;        // false: scheduled round; true: a driven batch's next poll
  std::uint64_t drive = 0;  // poll: which drive it belongs to
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_tick& x) {
  return f(caf::meta::type_name("batch_tick"), x.generation, x.poll, x.drive);
}

/// What a round's database job found.
enum class round_outcome {
  claimed,          // a new batch was claimed: drive it
  empty,            // nothing waits
  slot_occupied,    // another coordinator drives the active batch
  preempted,        // the claim lost to another claimer
  sweep,            // a RUNNING batch past its timeout: settle it as a failure
  resume,           // an active batch to drive again (start, or after an operator unblocked it)
  operator_settle,  // an operator asked to settle this batch
  error,            // the job failed (database): the next round tries again
};
std::string_view to_string(round_outcome o);

/// Result of a blocking job, sent back to the coordinator (local only).
struct batch_job_result {
  enum class kind {
    round_listed,    // a round's look at the database: stale batches, partitions with waiting changes
    active_listed,   // start-up: the active batches to resume
    round_prepared,  // one partition's claim, or one batch's adoption
    mr_opened,
    mr_recorded,
    mr_read,
    rebased,
    merged,
    reread,
    settled
  } what = kind::round_prepared;
  std::uint64_t drive = 0;                          // which driven batch this belongs to (stale results are ignored)
  round_outcome round = round_outcome::error;       // round_prepared
  workflow::batch::partition partition;             // round_prepared: where the claim or the adopted batch is
  std::vector<workflow::batch::partition> waiting;  // round_listed
  std::vector<std::pair<std::int64_t, workflow::batch::partition>> stale;  // round_listed: owned, past the timeout
  std::vector<std::pair<std::int64_t, workflow::batch::partition>> owned;  // round_listed: owned, RUNNING, not stale
  std::vector<std::int64_t> active;                                        // active_listed
  bool adoption = false;     // round_prepared: from adopt (operator settle, unblock, resume, sweep)
  bool holds_claim = false;  // round_prepared: the job marked its partition as being claimed here
  std::string settled_as;    // settled: what was written ("succeeded", "split", ...)
  std::int64_t batch_id = 0;
  int depth = 0;
  persistence::batch_status status = persistence::batch_status::RUNNING;
  std::vector<effects::batch_member_change> members;
  std::size_t deferred = 0;
  std::optional<std::int64_t> mr_iid;
  effects::batch_mr_view mr;
  messages::commit_base own_commit;  // mr_opened: what the batch's commit was applied to, when this job made it
  effects::merge_answer merge = effects::merge_answer::retryable;
  bool ok = true;          // settled / mr_recorded: the guarded write landed
  bool preempted = false;  // ... or another settler got there first (I6): stop driving
  std::string error;
};

using batch_coordinator = caf::typed_actor<
    /// Manual round: "started" | "in_progress" (a round's look at the database is under way). A
    /// round claims in every partition with waiting changes that this instance is not driving.
    caf::replies_to<batch_round_atom>::with<std::string>,
    /// Operator settle of a RUNNING or BLOCKED batch: close the MR, re-read, merged wins, else fail
    /// and requeue. "settling" | "busy" | "not_active".
    caf::replies_to<batch_settle_atom, std::int64_t>::with<std::string>,
    /// Drive this (RUNNING) batch again: after an operator unblocked it.
    caf::reacts_to<batch_adopt_atom, std::int64_t>,
    /// GitLab said (webhook) that the MR `mr_iid` of project `project` changed (pipeline finished,
    /// merged, closed): the drive of that MR reads it now instead of at its next poll.
    caf::reacts_to<batch_webhook_atom, std::string, std::int64_t>, caf::reacts_to<batch_tick>,
    caf::reacts_to<batch_job_result>>;

struct batch_coordinator_options {
  bool scheduled_rounds = true;  // false: manual rounds only (tests)
  bool resume_on_start = true;   // adopt the RUNNING batches found at start (durability)
};

batch_coordinator spawn_batch_coordinator(runtime::services& svc, batch_coordinator_options options = {});

// The pure decisions live in workflow/batch_decide.hpp; these names are kept for the shell's callers.
using workflow::batch::describe;
using workflow::batch::failure_cause;
using workflow::batch::failure_plan;
using workflow::batch::halves;
using workflow::batch::plan_failure;
using workflow::batch::requeue_split;
using workflow::batch::split_by_attempts;

}  // namespace changeflow::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(changeflow::actors::batch_job_result)
