#pragma once
// The operation row (fine-grained step) and its binding row (coarse phase), always written together
// in one transaction, operation first and binding second (the fixed lock order).
// Every write is refused before any SQL when the transition table forbids it, and is guarded by
// (operation_id, version, step) so a stale writer fails even after an A -> B -> A round trip (I6).

#include "persistence/result.hpp"
#include "persistence/session.hpp"
#include "workflow/status.hpp"
#include "workflow/transitions.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sql {
class Connection;
class ResultSet;
}  // namespace sql

namespace changeflow::persistence {

struct operation_row {
  std::string operation_id;
  std::string subject_id;
  std::string target_key;
  std::string flow;  // workflow::to_string(flow)
  workflow::step step = workflow::step::APPROVAL_SENDING;
  workflow::phase phase = workflow::phase::APPROVAL_SENDING;
  std::int64_t version = 0;
  std::string title;
  std::string payload_json;  // "" when NULL
  std::optional<std::int64_t> mr_iid;
  std::optional<std::string> mr_url;
  std::optional<std::string> approval_id;
  std::optional<std::int64_t> batch_id;
  int attempts = 0;
  int batch_attempts = 0;                       // batches claimed into since the last admission (batch.max_attempts)
  std::optional<std::int64_t> next_wake_at_ms;  // epoch ms (DB clock)
  std::optional<std::string> owner_instance;
  std::int64_t lease_epoch = 0;
  std::optional<std::string> last_error;
  std::optional<int> last_error_status;          // HTTP status of the last external error (migration 13)
  std::optional<std::int64_t> last_error_at_ms;  // when it was met (DB clock); unset for operator notes
  bool deploy_reported = false;  // a deploy report came before MERGED (migration 17): the MERGED writer checks
  std::int64_t created_at_ms = 0;
  std::int64_t updated_at_ms = 0;
  std::string requester;                   // verified identity that submitted it; "" for rows older than migration 6
  std::string repository;                  // GitLab project path every call of the change goes to (migration 7)
  std::string target_branch;               // branch its MR merges into
  std::optional<std::string> revert_of;    // the validated change this one reverts
  std::optional<std::string> reverted_by;  // this change's current revert
};

struct new_operation {
  std::string operation_id;
  std::string subject_id;
  std::string target_key;
  workflow::flow flow = workflow::flow::approve_then_create;
  workflow::step initial_step = workflow::step::APPROVAL_SENDING;  // must satisfy is_initial_step
  std::string title;
  std::string payload_json;  // "" stores NULL
  std::string owner_instance;
  std::int64_t lease_epoch = 0;
  std::string actor = "workflow";  // label of the first timeline event
  /// Verified identity that submitted it (or "anonymous" where configured); "" stores NULL.
  std::string requester;
  /// The repository (GitLab project path) and target branch, validated against the configuration by
  /// the caller. The binding's key is (subject_id, repository, target_key).
  std::string repository;
  std::string target_branch;
  /// The change this one reverts ("" for none): stored, and named by the first timeline event.
  /// Created through persistence::create_revert, which links the original in the same transaction.
  std::string revert_of;
};

enum class create_outcome {
  created,
  duplicate_operation,  // this operation_id already exists: an idempotent replay, nothing written
  in_progress,          // the relationship has a row that is not re-appliable: refused, nothing written
  preempted,            // a concurrent application changed the binding between read and write
};
std::string_view to_string(create_outcome o);

/// Inserts operation + binding (insert, or in-place reset of a re-appliable row pinned to the exact
/// phase and operation id read) + binding_history + first event, in one transaction (I5).
/// An initial step that is not `is_initial_step` is refused as illegal_transition before any SQL.
/// With `created`, the new row as the creation committed it is read in the same round trip and
/// stored there (only when the answer is `created`).
db_result<create_outcome> create_operation(session s, const new_operation& op,
                                           std::optional<operation_row>* created = nullptr);

/// A deploy report was recorded for these changes before they were MERGED (the general path of a
/// delivery: several or no named changes, a failure): marks the ones that have not ended, so their
/// MERGED writer checks the recorded reports (migration 17). The single-change deploy unit
/// (record_and_settle_deploy) marks in its own transaction.
db_result<done> mark_deploy_reported(session s, const std::vector<std::string>& operation_ids);

db_result<operation_row> load_operation(session s, const std::string& operation_id);
/// Bulk read (chunked IN lists); ids that do not exist are simply absent from the answer.
db_result<std::vector<operation_row>> load_operations(session s, const std::vector<std::string>& ids);
/// As load_operations, with only the columns a change's status document and its visibility check
/// read (http/dto: status_body, to_json; the requester and the subject): the payload, the approval
/// and batch ids, the retry counters, the wake time, the owner and lease, and the last error are left
/// at their defaults. For status reads (service/status_read), which answer many reads per query: a
/// row with 17 of the 29 columns, and two of the four time conversions, costs the database and the reader
/// less per read. Nothing but a status answer may use such a row.
db_result<std::vector<operation_row>> load_operation_views(session s, const std::vector<std::string>& ids);
/// A subject's operations, newest first.
db_result<std::vector<operation_row>> list_operations_by_subject(session s, const std::string& subject_id, int limit);
/// The operations one requester submitted, newest first ("my changes").
db_result<std::vector<operation_row>> list_operations_by_requester(session s, const std::string& requester, int limit);

struct operation_event_row {
  std::int64_t id = 0;
  std::string operation_id;
  std::optional<workflow::step> from_step;
  workflow::step to_step = workflow::step::APPROVAL_SENDING;
  std::optional<workflow::phase> from_phase;
  workflow::phase to_phase = workflow::phase::APPROVAL_SENDING;
  std::string cause;
  std::string actor;
  std::optional<std::string> instance_id;
  std::int64_t version = 0;
  std::int64_t at_ms = 0;
};
/// The timeline, oldest first.
db_result<std::vector<operation_event_row>> list_events(session s, const std::string& operation_id);

/// Write fencing: the write only lands while this instance still owns the row at this lease epoch.
struct owner_fence {
  std::string instance_id;
  std::int64_t lease_epoch = 0;
};

struct transition_request {
  std::string operation_id;
  std::int64_t expected_version = 0;
  workflow::step from = workflow::step::APPROVAL_SENDING;
  workflow::step to = workflow::step::APPROVAL_SENDING;
  workflow::actor_kind by = workflow::actor_kind::workflow;
  std::string cause;               // why, for the timeline
  std::string actor = "workflow";  // 'workflow' | 'operator:<name>' | 'callback' | 'reconciler' ...
  std::string instance_id;         // recorded on the event; "" stores NULL
  std::optional<std::int64_t> mr_iid;
  std::optional<std::string> mr_url;
  std::optional<std::string> approval_id;
  std::optional<std::int64_t> batch_id;
  bool clear_batch = false;
  std::optional<std::int64_t> wake_in_ms;  // next_wake_at = NOW(3) + wake_in_ms (DB clock)
  bool clear_wake = false;
  std::optional<int> attempts;
  std::optional<std::string> last_error;  // truncated to 1024 characters
  bool clear_last_error = false;
  /// `last_error` is what an external call of `from` answered: it is stamped with the database time
  /// and `last_error_status`, and counted as a failed attempt of `from` (operation_step_attempt).
  bool failed_attempt = false;
  std::optional<int> last_error_status;  // with failed_attempt; 0 or unset = no HTTP answer
  /// Stay in `from` (to == from) and try again later: a failed attempt is recorded and the next try
  /// stored as next_wake_at (wake_in_ms), with no timeline event and no change of `updated_at`.
  bool retry_in_step = false;
  std::optional<owner_fence> fence;
  /// Someone reads this change's row (a status reader keeps it): when the transition commits alone,
  /// the row it committed is read in the same round trip and handed to them (a group reads every
  /// row it moved anyway).
  bool want_row = false;
  /// The transition before this one, not written yet, written in the same commit: its UPDATE runs
  /// first (guarded by its own version and step), this one's then finds the row where that one left
  /// it (`expected_version` is `before->expected_version + 1`, `from` is `before->to`). Both events
  /// go to the timeline; the pair lands or fails as one. A step whose own work is an idempotent call
  /// that always leaves it (the bots' approvals after the pipeline passed) is written with the step
  /// that call leads to, one commit for both (workflow::transition_out::with_next).
  std::shared_ptr<const transition_request> before;
};

/// One transaction: guarded UPDATE operation, UPDATE binding phase, INSERT event, commit.
/// With `retry_in_step`: the same guard, one UPDATE that records the failed attempt and the next try.
/// Returns the new version. illegal_transition (no SQL ran), preempted (version/step/owner moved),
/// not_found, retryable, fatal. With `committed`, the row as this transition committed it is read in
/// the same round trip (a second statement of the same text, pinned to the new version) and stored
/// there; it stays unset when the transition did not land.
/// When the answer is lost with the connection (the statement may have committed), the transition's
/// event is read on a new connection: a transition that landed answers as if its answer had come, so
/// its actor counts it once. `lose_answer_after_commit` is a fault for tests: the transition commits
/// and its connection is killed before the answer is read (not for the batch admission, which is a
/// transaction of its own).
db_result<std::int64_t> transition(session s, const transition_request& req,
                                   std::optional<operation_row>* committed = nullptr,
                                   bool lose_answer_after_commit = false);

/// Group commit: the transitions of several operations in ONE transaction sent as ONE round trip
/// (`SET; START TRANSACTION; UPDATE ...; ...; COMMIT; SELECT; SET`), so N ready transitions cost
/// one commit (one fsync) instead of N. Transitions that set the same columns the same way share
/// one UPDATE: each brings its key, guard and values as a row of a derived table joined to its
/// operation row by key. Each keeps its own guard (version, step, owner fence), and
/// each gets its own outcome, in the order given: the trigger of migration 14 lists the rows that
/// were updated, so a transition whose guard did not match is `preempted` (or `not_found`) while
/// the others land. Requests that need more than their one UPDATE (admission to BATCH_WAITING) and
/// a second request for the same operation run alone, as `transition()`. When the group as a whole
/// fails (a deadlock, a certification conflict, a lost connection) it is rolled back and every
/// request is run alone, so an error of one never becomes an outcome of another. Needs a connection
/// opened with multi-statements (every connection of persistence::open_connection is).
/// With `rows`: for each request that landed in the group, its row as the transition committed it
/// (read inside the group's transaction, in the same round trip); for a request that ran alone, its
/// row only when it asks for it (`want_row`, read in its own round trip); nullopt for the others.
std::vector<db_result<std::int64_t>> transition_group(session s, const std::vector<transition_request>& reqs,
                                                      std::vector<std::optional<operation_row>>* rows = nullptr);

/// A write of its own that can join a group's transaction: a callback's record and the flip it
/// causes. Its statements run inside the group's transaction, after the transitions' UPDATEs, the
/// units in operation id order; the group's one COMMIT makes them durable with the
/// transitions. A unit does only its common case in a group: whatever it cannot finish there (a
/// copy of a recorded delivery, an operation that is not where the unit expects it) it rolls back
/// to the savepoint `changeflow_unit` it set, says so in its answer, and does afterwards alone with
/// its full rules.
struct group_unit {
  /// The one operation whose row it writes (the lock order). A group holds at most one unit per
  /// operation; a transition of the same operation in the group writes before it.
  std::string operation_id;
  /// Its statements. None of them returns rows.
  std::function<std::vector<std::string>(sql::Connection& conn)> statements;
  /// Its verdict, an SQL expression evaluated right after its statements: 1 when it carried out its
  /// work in the group (the group records it in its answer and in its receipt).
  std::string verdict;
  /// Told the verdict. What it was told counts only when the group committed.
  std::function<void(bool carried_out)> decided;
  /// When set, the group reads the unit's operation row at its end, in the one SELECT that reads
  /// the transitions' rows, and hands it here (the unit writes after any transition of its
  /// operation in the group, so it is the row as the unit left it; none when there is no such row). When the group's answer was lost
  /// and its receipt says it committed, the row is read after the group instead: as the unit left
  /// it, or as a writer after the group left it. A unit's own answer then carries
  /// only its verdict: a row read there, through a SELECT of its own, cost MariaDB several times an
  /// extra row in the group's read. What it was handed counts only when the group committed and
  /// the unit's answer says it wrote the row.
  std::function<void(const operation_row&)> take_row;
  /// After a committed group: true when its answer says the group carried it out (nothing left to
  /// do alone). What a unit could not settle in the group is finished on the pool, not by the
  /// committer, so the next group does not wait for it.
  std::function<bool()> settled;
  /// A callback from an external system (its work alone uses the pool's reserved lane).
  bool callback = false;
  /// Runs once after the group (transition_committer calls it), on the group's connection.
  /// `joined`: the group committed with the unit in it (its answer was read, or its receipt after
  /// the answer was lost). Otherwise the unit does its work alone on `ctx`: it was left out, or the
  /// group failed and was rolled back, or the group's answer was lost after its COMMIT and its
  /// receipt could not be read. In that last case what it wrote is committed, and its work alone
  /// finds it done (a callback already recorded, a change already created), as a client's retry
  /// would.
  std::function<void(db_context& ctx, bool joined)> finish;
};

/// What a group with units reports besides its transitions' outcomes (transition_group below).
struct group_run {
  /// In: a fault for tests (faults.lose_group_answer_every). The group's last statement kills its
  /// own connection right after its COMMIT, so the group is committed but its answer never arrives,
  /// exactly as when a connection drops after a COMMIT.
  bool lose_answer_after_commit = false;
  /// In: where the group writes its receipt (table group_receipt, migration 20): its committer's
  /// slot, and the group's number in that slot, which must grow from group to group. Empty: no
  /// receipt, and a lost answer is taken for a failed group (its members run alone and find
  /// what it wrote).
  std::string receipt_slot;
  std::uint64_t receipt_seq = 0;
  /// Out: the answer was lost and the receipt said the group committed; every member was given the
  /// outcome the answer would have given it (`failed` says what was lost).
  bool recovered = false;
  /// Out: joined[i] says whether units[i] committed in the group.
  std::vector<bool> joined;
  /// Out: why the group failed as a whole (rolled back, or its answer lost), its members then run
  /// alone unless `recovered`; nullopt when it committed with its answer or no group was formed.
  std::optional<db_error> failed;
};

/// transition_group with units that join the same transaction (see group_unit), reporting into
/// `run`; the caller then runs each unit's `finish`. Units run nothing alone here.
std::vector<db_result<std::int64_t>> transition_group(session s, const std::vector<transition_request>& reqs,
                                                      std::vector<std::optional<operation_row>>* rows,
                                                      const std::vector<group_unit*>& units, group_run& run);

/// Drops the group receipts no group wrote for a day (those of processes that ended; a receipt
/// matters for the moments after a lost answer). Returns how many.
db_result<std::int64_t> sweep_group_receipts(session s);

/// create_operation as a unit that joins a transition group (transition_committer::submit_unit):
/// in the group the change takes its target (first apply, or re-apply over a change that ended)
/// in the group's one commit. Every other answer (the target held, an id that exists, a racing
/// first apply) and a group that failed are answered by create_operation, run alone right after
/// the group; what the group tried is undone. With `want_row`, `done` also gets the row as the
/// creation committed it. nullptr when create_operation would refuse the initial step before any
/// SQL (the caller runs create_operation for that answer).
///
/// With `keyed`, a submission under an idempotency key: the key's record, written COMPLETED with the
/// answer a created change gets (`record_insert`, idem_completed_insert_sql), claims the key in the
/// unit's own part of the transaction, and the change is created only under that claim; both stay
/// only when the change takes its target, so the group commits the creation and its stored answer
/// together. Every other case (a record under the key: a replay, a request still in flight, a key
/// reused for another body, an expired record not yet purged; the target held; an id that exists;
/// a group that failed or lost its answer) is undone in the group, and `alone` runs the
/// submission's whole keyed path on the pool instead of create_operation.
struct keyed_creation {
  std::function<std::string(sql::Connection&)> record_insert;
  std::function<void(db_context&)> alone;
};
std::shared_ptr<group_unit> create_operation_unit(
    const new_operation& op, bool want_row,
    std::function<void(db_context&, const db_result<create_outcome>&, std::optional<operation_row>)> done,
    std::shared_ptr<const keyed_creation> keyed = nullptr);

struct validated_flip {
  std::string operation_id;
  std::string subject_id;
  std::int64_t new_version = 0;
  bool settled = false;  // the delivery's ledger row was classified in the same transaction
};

/// A delivery to classify in the same transaction as the flip it caused (the ledger row's outcome
/// and the operations it was routed to), so a deploy callback that validates its one change costs
/// one commit, not two.
struct ledger_settlement {
  std::string ledger_key;
  std::string outcome;
  std::vector<std::string> operation_ids;
};
/// Locks operation then binding; no-op unless the binding is MERGED or VALIDATED;
/// repairs a lagging step to CALLED_BACK; flips MERGED -> VALIDATED with a guarded update. The
/// value is set ONLY when this call flipped the binding, so of two racing callers exactly one sees
/// it. `via` names the path for the timeline ("callback" | "reconciliation"). With `settle`, a flip
/// also classifies that ledger row in the same transaction (`settled`); without a flip it is left.
db_result<std::optional<validated_flip>> mark_validated(session s, const std::string& operation_id,
                                                        const std::string& via,
                                                        const ledger_settlement* settle = nullptr);

struct merged_candidate {
  std::string operation_id;
  std::int64_t mr_iid = 0;
};
/// Reconciliation window of one repository (MR numbers are per project): phase MERGED, updated_at
/// inside (now - max_age, now - min_age) on the DB clock, oldest first, only rows with an MR number.
db_result<std::vector<merged_candidate>> merged_in_window(session s, const std::string& repository, int min_age_s,
                                                          int max_age_s, int limit);

}  // namespace changeflow::persistence
