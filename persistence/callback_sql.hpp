#pragma once
// Internal: writes of callback_ledger that another repository's transaction composes. Every write
// of the ledger lives in callback_repo.cpp.

#include "persistence/sql_util.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace changeflow::persistence::detail {

/// A PENDING ledger row (no operation yet) inside the caller's transaction. False on a duplicate key.
bool insert_pending_ledger(sql::Connection& conn, const std::string& ledger_key, const std::string& kind,
                           const std::string& payload_json);

/// The classified outcome on a PENDING ledger row (the first classification wins) and, when this
/// call set it, the operations the delivery was routed to (callback_operation); inside the caller's
/// transaction. True when this call set the outcome.
bool settle_ledger(sql::Connection& conn, const std::string& ledger_key, std::string_view outcome,
                   const std::vector<std::string>& operation_ids);

}  // namespace changeflow::persistence::detail
