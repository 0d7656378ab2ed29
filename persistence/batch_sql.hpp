#pragma once
// Internal: writes of the batch tables (merge_batch, merge_batch_request, merge_batch_history) that
// another repository's transaction composes. Every write of these tables lives in batch_repo.cpp.

#include "persistence/sql_util.hpp"

#include <string>

namespace changeflow::persistence::detail {

/// Admits an operation to the batch waiting set with its partition (repository, target branch read
/// from its row), inside the caller's transaction. False when it is already admitted (a requeued
/// member keeps its row): not an error.
bool admit_operation(sql::Connection& conn, const std::string& operation_id);

}  // namespace changeflow::persistence::detail
