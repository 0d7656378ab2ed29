#pragma once
// Internal: the statements of a guarded transition, run inside a transaction the caller owns, so
// composite transactions (approval callback guard, batch settlement) reuse exactly the same guard.

#include "persistence/operation_repo.hpp"
#include "persistence/sql_util.hpp"

namespace changeflow::persistence::detail {

/// Guarded UPDATE operation + binding phase + event. Throws sql::SQLException; returns ok with the
/// new version, or preempted / not_found (nothing written by this call then). Does not consult the
/// transition table: callers check `workflow::is_allowed` first, before any SQL.
db_result<std::int64_t> apply_transition(sql::Connection& conn, const transition_request& req);

/// A creation whose first step is not `workflow::is_initial_step` is refused before any SQL.
std::optional<db_error> refuse_initial_step(const new_operation& op);

/// create_operation's statements, inside a transaction the caller owns and commits only on
/// `created` (any other answer wrote nothing the caller should keep).
db_result<create_outcome> insert_operation(sql::Connection& conn, const new_operation& op);

/// Column list of operation_row (times as epoch ms) and its reader.
extern const char* const operation_columns;
operation_row read_operation(sql::ResultSet& rs);

}  // namespace changeflow::persistence::detail
