#pragma once
// Internal: the statements of a guarded transition, run inside a transaction the caller owns, so
// composite transactions (approval callback guard, batch settlement) reuse exactly the same guard.

#include "persistence/operation_repo.hpp"
#include "persistence/sql_util.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::persistence::detail {

/// Guarded UPDATE operation + binding phase + event. Throws sql::SQLException; returns ok with the
/// new version, or preempted / not_found (nothing written by this call then). Does not consult the
/// transition table: callers check `workflow::is_allowed` first, before any SQL.
/// With `committed`, the row at the new version is read in the same text and stored there (left
/// unset when the UPDATE did not land). `lose_answer_after_commit` is a fault for tests: the UPDATE
/// commits and its connection is killed before the answer is read. A pair (`req.before`) is a
/// transaction of its own, sent in one compound statement: never pass one inside a transaction the
/// caller owns (its START TRANSACTION would end the caller's).
db_result<std::int64_t> apply_transition(sql::Connection& conn, const transition_request& req,
                                         std::optional<operation_row>* committed = nullptr,
                                         bool lose_answer_after_commit = false);

/// Why a transition that did not land missed: where it (a pair: its first transition) expected the row.
std::string not_where_expected(const transition_request& req);

/// The head of every UPDATE of `operation` whose WHERE names rows by their key (operation_id = x, or
/// IN a list). Without the hint MariaDB estimates, for each such statement, a range on every other
/// index one of the guard's columns leads (owner_instance, phase, mr_iid): for the owner's guard that
/// is two dives into idx_operation_owner_phase spanning all of the instance's rows, finished ones
/// included, so each transition cost more as history grew. With it the key is the only index the
/// optimizer considers, which is the plan it chose anyway.
inline constexpr const char* update_operation_by_key = "UPDATE operation FORCE INDEX (PRIMARY) SET ";

/// The guarded UPDATE of one transition, as text (the group commit sends several in one round trip).
std::string transition_update_sql(const sql_text& t, const transition_request& req);

/// The group's transitions, in its order, as few guarded UPDATEs as their shapes allow. Those that
/// set the same columns the same way share ONE statement: each brings its key, its guard and its
/// values as one row of a derived table, which is joined to the operation rows by key. Each row
/// still lands only where its own guard holds, and the trigger lists each row it moved, as with one
/// UPDATE per transition; MariaDB parses, plans and opens the table once per shape instead of once
/// per transition (docs/performance.md, "One UPDATE for a group's transitions"). A transition whose
/// shape no other shares keeps its own UPDATE. Each operation at most once (transition_group runs a
/// second request for one alone). The derived table's values are literals, which give
/// way to the column's collation when compared, so the join stays a lookup by key whatever the
/// connection's collation.
/// `also_where` is appended to every statement's guard.
std::vector<std::string> transition_updates(const sql_text& t, const std::vector<const transition_request*>& reqs,
                                            const std::string& also_where = {});

/// transition_update_sql up to its WHERE: "UPDATE operation SET ..." with the step, its attempts,
/// wake-up, error and event columns, for a writer that guards the row its own way.
std::string transition_set_sql(const sql_text& t, const transition_request& req);

/// A creation whose first step is not `workflow::is_initial_step` is refused before any SQL.
std::optional<db_error> refuse_initial_step(const new_operation& op);

/// create_operation's statements, sent as ONE text, inside a transaction the caller owns. With
/// `begin_transaction` the text starts that transaction itself (the caller's guard was made with
/// transaction::begun_in_script). With `commit_in_text` as well, the text also ends it: every write
/// in it is conditional on the binding it read under its lock (nothing is written unless the change
/// takes the target), so it commits in the same round trip whatever the answer, and a creation is ONE
/// round trip; a statement error stops the text before its COMMIT and the caller rolls back. Without
/// it the caller commits only on `created` (any other answer wrote nothing the caller should keep).
/// With `commit_in_text` and `created`, the new row is read after the COMMIT in the same text.
db_result<create_outcome> insert_operation(sql::Connection& conn, const new_operation& op,
                                           bool begin_transaction = false, bool commit_in_text = false,
                                           std::optional<operation_row>* created = nullptr);

/// Marks the changes `where_id` selects (" = 'id'", "IN (...)") that have not ended: a deploy report
/// came for them before they were MERGED (migration 17). Their `updated_at` stays as it was.
std::string deploy_reported_mark_sql(const std::string& where_id);

/// Column list of operation_row (times as epoch ms) and its reader.
extern const char* const operation_columns;
operation_row read_operation(sql::ResultSet& rs);
/// One SELECT that answers a unit: `answer` (its own columns, each with an alias), followed by the
/// operation rows the join condition `rows_on` selects (e.g. "operation_id = 'x' AND @flip = 1");
/// with none, one row whose operation columns are NULL. So a unit's answer and the rows it hands
/// back travel as one statement.
std::string answer_with_rows_sql(const std::string& answer, const std::string& rows_on);

/// What a callback's unit writes in a group, in this order: `flip`, the guarded UPDATE of its
/// operation (it takes the row's lock first, the group's lock order); `record`, the INSERT whose
/// duplicate key (1062) means the delivery is a copy; `then`, further writes ("" for none).
struct flip_writes {
  std::string flip;
  std::string record;
  std::string then;
};

/// A callback as a group_unit: `writes` in the group, `record` and `then` only when the flip landed,
/// and everything undone to the unit's savepoint unless it flipped and was no copy. `carried` runs
/// when the group committed it (with the operation's row as the flip left it); `alone` otherwise,
/// for the unit's full rules on its own.
std::shared_ptr<group_unit> flip_unit(std::string operation_id, std::function<flip_writes(const sql_text&)> writes,
                                      std::function<void(db_context&, std::optional<operation_row>)> carried,
                                      std::function<void(db_context&)> alone);

// Writes of `operation` that other repositories' transactions compose (this table's writes all live
// in operation_repo.cpp; the composing unit of work owns the transaction).

/// A bulk move of batch members `from` -> `to`, written as actor 'batch'.
struct member_move {
  workflow::step from;
  workflow::step to;
  std::string cause;
  std::string instance_id;
  std::string extra_set;  // e.g. ", batch_id = NULL, mr_iid = NULL"
  std::function<void(statement&, int)> bind_extra = {};
  int extra_params = 0;
};
/// Locks the operation rows at step `from` matching `where` (bound from parameter 2 by `bind`), in
/// the fixed lock order (operation rows by id, then bindings); returns their ids.
std::vector<std::string> lock_members(sql::Connection& conn, const std::string& where,
                                      const std::function<int(statement&, int)>& bind, workflow::step from);
/// Moves the locked member operations: per chunk ONE guarded statement (step still `from`); the
/// transition trigger writes each row's event and its binding's phase. Returns the rows moved; an
/// edge the transition table forbids writes nothing.
int move_members(sql::Connection& conn, const std::vector<std::string>& ids, const member_move& m);
/// The batch MR on every member the batch claimed (BATCH_CLAIMED, operation.batch_id = batch_id).
void set_claimed_members_mr(sql::Connection& conn, std::int64_t batch_id, std::int64_t mr_iid,
                            const std::string& mr_url);
/// The original of a revert names its revert: the step stays, the version moves, the timeline says
/// "reverted by <id>" (the transition trigger). False when the row is gone.
bool link_revert(sql::Connection& conn, const std::string& original_id, const std::string& revert_id,
                 const std::string& actor, const std::string& instance_id);
/// Lease takeover of orphaned rows (`orphaned`: a condition over `operation o LEFT JOIN instance i`,
/// re-checked by the UPDATE so a peer that took a row first keeps it): owner -> `my_id`, lease epoch
/// and version + 1, one timeline event per row. Returns the rows this call took.
int take_over_rows(sql::Connection& conn, const std::vector<std::string>& ids, const std::string& orphaned,
                   const std::string& my_id);

}  // namespace changeflow::persistence::detail
