#pragma once
// Reads of the one-row-per-relationship binding table (I5). Writes happen only through
// operation_repo (create_operation, transition, mark_validated), together with the operation row.

#include "persistence/result.hpp"
#include "persistence/session.hpp"
#include "workflow/status.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace changeflow::persistence {

struct binding_row {
  std::int64_t id = 0;
  std::string subject_id;
  std::string repository;  // the same target name in two repositories is two relationships
  std::string target_key;
  std::string operation_id;
  workflow::phase phase = workflow::phase::APPROVAL_SENDING;
  std::int64_t created_at_ms = 0;
  std::int64_t updated_at_ms = 0;
};

/// not_found when the relationship has never been applied.
db_result<binding_row> find_binding(session s, const std::string& subject_id, const std::string& repository,
                                    const std::string& target_key);

}  // namespace changeflow::persistence
