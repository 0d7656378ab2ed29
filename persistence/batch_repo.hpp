#pragma once
// Batch aggregation (batch/database write-up, sections 3.1-3.4 and 3.7):
//   I1 one active slot per partition (repository, target branch): merge_batch.active_slot
//      (generated) is UNIQUE together with the partition (migration 7); RUNNING and BLOCKED hold
//      it, a terminal status releases it in the same UPDATE;
//   I2 a claim moves waiting rows with a guarded UPDATE whose affected rows must equal the rows
//   read; I3 the claim reads the waiting set without locks (READ COMMITTED, no FOR UPDATE), so
//   admission
//      never waits on a claim;
//   I4 admission is an INSERT against UNIQUE operation_id: a duplicate key means "already
//   admitted".

#include "persistence/operation_repo.hpp"
#include "persistence/result.hpp"
#include "persistence/session.hpp"
#include "workflow/batch_decide.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::persistence {

enum class batch_status : int { RUNNING = 1, SUCCEEDED = 2, FAILED = 3, BLOCKED = 4 };
std::string_view to_string(batch_status s);

/// Where a batch merges: (repository, target branch). Each has its own active slot.
using batch_partition = workflow::batch::partition;

/// The partitions with at least one waiting row (lock-free, one index scan), in a stable order: the
/// pre-check of a round, so no partition's slot is taken and rolled back when nothing waits there.
db_result<std::vector<batch_partition>> waiting_partitions(session s);

struct batch_member {
  std::int64_t request_id = 0;
  std::string operation_id;
  int split_group = 0;
};

enum class claim_kind { slot_occupied, empty, claimed, preempted };
std::string_view to_string(claim_kind k);

struct claim_result {
  claim_kind kind = claim_kind::empty;
  std::int64_t batch_id = 0;           // set when claimed
  std::vector<batch_member> members;   // the waiting rows the batch took, in claim order
  int depth = 0;                       // bisection depth (see below)
  std::size_t deferred = 0;            // of those, rows the plan sent back to the waiting set
  std::vector<operation_row> carried;  // the member operations the batch carries, in plan order
};

/// A round's plan from the claimed members' operation rows (claim order): the members the batch
/// carries, in commit order, and those that wait for the next round (a file an earlier member
/// touches). Pure: it runs inside the claim's transaction.
struct round_plan {
  std::vector<std::string> included;
  std::vector<std::string> deferred;
};
using round_planner = std::function<round_plan(const std::vector<operation_row>&)>;

/// Test seam: called inside the open claim transaction after each step.
enum class claim_stage { slot_taken, waiting_read, members_claimed };
using claim_hook = std::function<void(claim_stage)>;

/// A round's claim of one partition, ONE unit of work (one transaction, retried whole on a deadlock).
/// Before the transaction, waiting rows of operations that left BATCH_WAITING (closed or forced to
/// fail while waiting) are removed: they are never claimed nor counted. Then:
///  1. take the partition's slot (1062 -> slot_occupied);
///  2. plain read of up to `max_members` waiting rows of that partition admitted before this
///     millisecond (DB clock) ordered by (created_at, id), keeping the split group of the oldest one
///     (bisection halves go separately); none -> empty (rollback, no batch row);
///  3. guarded claim UPDATE (mismatch -> preempted, rollback), membership history CLAIMED;
///  4. lineage: a bisection half (split group != 0) records the batch it was split from and is one
///     level deeper (that batch's failure reason starts with "bisect"); other batches stay at 0;
///  5. `plan` over the claimed operations (none: every member is included, in claim order); the
///     deferred rows go back to the waiting set (created_at kept, so they lead the next round;
///     history DEFERRED);
///  6. the included members BATCH_WAITING -> BATCH_CLAIMED (operation.batch_id set,
///     batch_attempts + 1, the one place an attempt is counted), guarded by step: a member closed
///     since step 2 is not carried;
///  7. commit; `carried` is re-read after step 6 (attempt counts include this batch).
/// Claims of different partitions never meet. `hook` is a test seam called after steps 1-3.
db_result<claim_result> claim_round(session s, const batch_partition& where, int max_members,
                                    const claim_hook& hook = {}, const round_planner& plan = {},
                                    const std::string& instance_id = {});

/// Guarded status change: affected rows must be 1 (else preempted). SUCCEEDED/FAILED release the
/// slot in the same UPDATE; BLOCKED keeps it.
db_result<done> finish_batch(session s, std::int64_t batch_id, batch_status expected, batch_status next,
                             const std::optional<std::string>& reason = std::nullopt);

enum class member_reset { requeue, remove };
/// One transaction, guarded write FIRST: batch expected -> FAILED (a second settler
/// gets preempted and nothing else runs), then every member is put back in the waiting set
/// (batch_id NULL, original created_at kept) or removed (BATCH_FAILED, last_error = the cause);
/// membership history is appended. With `requeue`, the members in `leaving` (out of batch
/// attempts) are removed instead, with `leaving_cause` (default `reason`) as their cause.
/// Returns the number of waiting rows reset (requeued or removed after `leaving`).
db_result<int> settle_failed_batch(session s, std::int64_t batch_id, batch_status expected, member_reset reset,
                                   const std::string& reason, const std::vector<std::string>& leaving = {},
                                   const std::string& leaving_cause = {});

/// Bisection: batch RUNNING -> FAILED (guarded, first), each group of operation ids goes back to
/// the waiting set under a fresh split group number (claimed one group at a time, in group order);
/// members in no group are removed (they failed alone). Returns the number requeued.
db_result<int> requeue_members(session s, std::int64_t batch_id, const std::vector<std::vector<std::string>>& groups,
                               const std::string& reason);

struct batch_row {
  std::int64_t id = 0;
  batch_partition partition;
  std::optional<std::string> owner_instance;  // whose coordinator drives it (the claimer, or who took it over)
  batch_status status = batch_status::RUNNING;
  std::optional<std::int64_t> mr_iid;
  std::optional<std::string> branch;
  int split_depth = 0;
  std::optional<std::int64_t> parent_batch_id;
  std::optional<std::string> failure_reason;
  std::int64_t created_at_ms = 0;
  std::int64_t updated_at_ms = 0;
  std::vector<std::string> members;  // operation ids claimed by this batch (from the history)
};
db_result<batch_row> load_batch(session s, std::int64_t batch_id);
/// Newest first; `before_id` 0 = from the newest. Members are not filled (use load_batch).
db_result<std::vector<batch_row>> list_batches(session s, std::int64_t before_id, int limit);
/// Read-only sweep candidates: RUNNING batches created more than `seconds` ago (DB clock). The
/// caller settles each (close the MR first) through the guarded settle_failed_batch.
db_result<std::vector<std::int64_t>> sweep_running_older_than(session s, int seconds);

// -- coordinator support: the member operations move with their batch, bulk and guarded
// by step, in the same transaction as the batch write that causes the move (guarded write first).

/// set_batch_mr plus every claimed member's mr_iid/mr_url, one transaction.
db_result<done> record_batch_mr(session s, std::int64_t batch_id, std::int64_t mr_iid, const std::string& branch,
                                const std::string& mr_url);

/// Success (or "merged wins"): guarded expected -> SUCCEEDED first, then members BATCH_CLAIMED ->
/// BATCH_MERGED with the MR number, one transaction. Returns the operations moved.
db_result<int> settle_succeeded(session s, std::int64_t batch_id, batch_status expected, std::int64_t mr_iid,
                                const std::string& cause, const std::string& instance_id);

/// The active batches this instance's coordinator drives, members not filled: the ones it owns,
/// after taking over (guarded UPDATE of the owner) those without an owner or whose owner's lease
/// expired. A live peer's batches are never taken: two coordinators never drive one batch.
db_result<std::vector<batch_row>> own_active_batches(session s, const std::string& my_id);
/// One batch: taken over if adoptable (see own_active_batches); true when it is this instance's.
db_result<bool> own_batch(session s, std::int64_t batch_id, const std::string& my_id);

struct waiting_row {
  std::string operation_id;
  batch_partition partition;
  int split_group = 0;
  std::int64_t admitted_at_ms = 0;
};
/// The waiting set, oldest first (ops view).
db_result<std::vector<waiting_row>> list_waiting(session s, int limit);

}  // namespace changeflow::persistence
