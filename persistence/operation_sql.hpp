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

/// Column list of operation_row (times as epoch ms) and its reader.
extern const char* const operation_columns;
operation_row read_operation(sql::ResultSet& rs);

}  // namespace changeflow::persistence::detail
