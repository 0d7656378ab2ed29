#pragma once
// Operator audit trail. Params arrive already masked and truncated by the caller.
// A duplicate dedup_key means "already recorded": the existing row is kept, never overwritten.

#include "persistence/result.hpp"
#include "persistence/session.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::persistence {

struct audit_entry {
  std::string operator_name;
  std::string action;
  std::string target;
  std::string params_json;  // "" stores NULL
  std::string outcome;
  std::optional<std::string> dedup_key;
};

struct audit_row {
  std::int64_t id = 0;
  std::int64_t at_ms = 0;
  audit_entry entry;
};

/// true = recorded now, false = already recorded under this dedup_key.
db_result<bool> insert_audit(session s, const audit_entry& e);
/// Newest first; `before_id` 0 = from the newest.
db_result<std::vector<audit_row>> list_audit(session s, std::int64_t before_id, int limit);

}  // namespace changeflow::persistence
