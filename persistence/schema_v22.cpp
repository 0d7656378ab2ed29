// Migration 22: reads that do not grow with the history.
//
// - The reconciliation's deploy watermark (the largest MR number with a successful deploy report, per
//   project, read on every reconciliation pass) had only (status, mr_iid) to go by. Every successful
//   report has the same status, so the server read the whole table for it: about 0.1 s of MariaDB's
//   CPU per pass at 200,000 finished changes, landing in whatever flow ran beside it. (project,
//   status, mr_iid) answers it from the end of one index range; it replaces the old index, which
//   served no other read (every other read of the table names its MR number: idx_deploy_mr).
// - The start-up assignment of rows from before migration 7 (persistence::adopt_rows_without_repository)
//   now runs only while an operation is still unassigned, found by index; its UPDATEs of the binding
//   tables read both tables whole at every start-up. It assigns the operations last, so none left
//   means an earlier pass assigned the rest. Passes of earlier versions assigned the operations
//   first: bindings such a pass left unassigned when it stopped half-way take their operation's
//   repository here, once. IGNORE: a binding whose relationship a later change of the same subject
//   and target already holds in that repository stays as it is (the unique key refuses the copy),
//   as the start-up assignment left it, instead of stopping every start-up at this migration. The
//   assignment names where a binding belongs and changes nothing else, so it keeps the binding's
//   `updated_at` (the start-up assignment does the same).

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v22() {
  return {
      "ALTER TABLE deploy_callback ADD KEY IF NOT EXISTS idx_deploy_project_status_mr (project, status, mr_iid), "
      "DROP INDEX IF EXISTS idx_deploy_status_mr",
      "UPDATE IGNORE binding b JOIN operation o ON o.operation_id = b.operation_id SET b.repository = o.repository, "
      "b.updated_at = b.updated_at WHERE b.repository = '' AND o.repository <> ''",
      "UPDATE IGNORE binding_history h JOIN operation o ON o.operation_id = h.operation_id SET h.repository = "
      "o.repository "
      "WHERE h.repository = '' AND o.repository <> ''",
  };
}

}  // namespace changeflow::persistence
