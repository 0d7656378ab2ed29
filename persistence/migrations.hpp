#pragma once
// Versioned schema migrations, run at start-up. Each migration runs once, in version order, and is
// recorded in schema_migrations after all its statements succeeded. Several instances starting at
// once serialize on a named lock (GET_LOCK). MariaDB DDL is not transactional, so statements are
// written to be re-runnable (IF NOT EXISTS) in case a migration failed half-way.

#include "persistence/result.hpp"
#include "persistence/session.hpp"

#include <string>
#include <vector>

namespace changeflow::persistence {

struct migration {
  int version;
  std::string name;
  std::vector<std::string> statements;
};

/// The project's migrations, in order. SQL lives in persistence/ only.
const std::vector<migration>& all_migrations();

struct migrate_result {
  std::vector<int> applied;  // versions applied by this call
  bool ok = true;
  /// No connection could be opened: nothing ran, and trying again later may succeed (the database
  /// may still be starting). `error` is the driver's message, `code` its error number.
  bool unreachable = false;
  int code = 0;
  std::string error;  // names the failing migration and statement
};

migrate_result migrate(session s, const std::vector<migration>& migrations);
/// Highest applied version, 0 when none.
db_result<int> current_schema_version(session s);

/// Completes migration 7 with what only the configuration knows: rows written before it (repository
/// '') belong to the one repository changeflow served then, `project` and `target_branch` (the
/// global gitlab.project and gitlab.target_branch). Idempotent; timestamps are kept, so the
/// reconciliation window and the sweeps see the rows as before. Returns the operations assigned.
db_result<int> adopt_rows_without_repository(session s, const std::string& project, const std::string& target_branch);

}  // namespace changeflow::persistence
