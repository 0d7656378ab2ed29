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

/// true = admitted now, false = already admitted (not an error). The workflow admits through
/// `transition` (to BATCH_WAITING), which takes the partition from the operation; this is the
/// bare insert for rows without an operation.
db_result<bool> admit(session s, const std::string& operation_id, const batch_partition& where = {});
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
  std::int64_t batch_id = 0;  // set when claimed
  std::vector<batch_member> members;
};

/// Test seam: called inside the open claim transaction after each step.
enum class claim_stage { slot_taken, waiting_read, members_claimed };
using claim_hook = std::function<void(claim_stage)>;

/// Before the transaction, waiting rows of operations that left BATCH_WAITING (closed or forced to
/// fail while waiting) are removed: they are never claimed nor counted.
/// One transaction: take the partition's slot (1062 -> slot_occupied), plain read of up to
/// `max_members` waiting rows of that partition admitted before this millisecond (DB clock)
/// ordered by (created_at, id), keep the split group of the oldest one (bisection halves go
/// separately), guarded claim UPDATE (mismatch -> rollback -> preempted), membership history,
/// commit. Empty -> rollback, no batch row. Claims of different partitions never meet.
db_result<claim_result> claim(session s, const batch_partition& where, int max_members, const claim_hook& hook = {});

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

/// After a claim: a bisection half (split group != 0) records the batch it was split from and is
/// one level deeper (failure_reason of that batch starts with "bisect"); other batches stay at 0.
/// Returns the depth.
db_result<int> record_lineage(session s, std::int64_t batch_id);

/// Same-file conflict: these claimed members go back to the waiting set (created_at kept, so they
/// lead the next round), guarded by the batch still RUNNING; history event DEFERRED. Their
/// operations are still BATCH_WAITING (they were never marked claimed). Returns rows released.
db_result<int> defer_members(session s, std::int64_t batch_id, const std::vector<std::string>& operation_ids);

/// Members of the batch BATCH_WAITING -> BATCH_CLAIMED (operation.batch_id set, batch_attempts + 1),
/// bulk, guarded by step and by the batch still RUNNING. Returns the operations moved.
db_result<int> mark_members_claimed(session s, std::int64_t batch_id, const std::string& instance_id);

/// set_batch_mr plus every claimed member's mr_iid/mr_url, one transaction.
db_result<done> record_batch_mr(session s, std::int64_t batch_id, std::int64_t mr_iid, const std::string& branch,
                                const std::string& mr_url);

/// Success (or "merged wins"): guarded expected -> SUCCEEDED first, then members BATCH_CLAIMED ->
/// BATCH_MERGED with the MR number, one transaction. Returns the operations moved.
db_result<int> settle_succeeded(session s, std::int64_t batch_id, batch_status expected, std::int64_t mr_iid,
                                const std::string& cause, const std::string& instance_id);

/// The active batches (RUNNING or BLOCKED), at most one per partition, with their members.
db_result<std::vector<batch_row>> find_active_batches(session s);

struct waiting_row {
  std::string operation_id;
  batch_partition partition;
  int split_group = 0;
  std::int64_t admitted_at_ms = 0;
};
/// The waiting set, oldest first (ops view).
db_result<std::vector<waiting_row>> list_waiting(session s, int limit);

}  // namespace changeflow::persistence
