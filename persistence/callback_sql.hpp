#pragma once
// Internal: writes of callback_ledger that another repository's transaction composes. Every write
// of the ledger lives in callback_repo.cpp.

#include "persistence/sql_util.hpp"

#include <string>

namespace changeflow::persistence::detail {

/// A PENDING ledger row (no operation yet) inside the caller's transaction. False on a duplicate key.
bool insert_pending_ledger(sql::Connection& conn, const std::string& ledger_key, const std::string& kind,
                           const std::string& payload_json);

}  // namespace changeflow::persistence::detail
