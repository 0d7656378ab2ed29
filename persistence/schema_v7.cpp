// Migration 7: several GitLab repositories, and one batch slot per (repository, target branch).
//
// A change names the GitLab project (`repository`, its path) and the branch it merges into
// (`target_branch`); both are written once by create_operation and never change, and every GitLab
// call the change makes uses them. The binding's key gains the repository: the same target name in
// two repositories is two independent targets, each with at most one change in flight (I5). The
// target branch is not part of that key: one change per target and repository at a time, whichever
// branch it goes to, so two changes of one file set never race each other into two branches.
//
// I1 is partitioned: the active slot is unique per (repository, target_branch), so each partition
// has at most one RUNNING or BLOCKED batch while different partitions batch at the same time. The
// waiting rows carry their partition (copied from the operation at admission) so a claim reads one
// partition's waiting set through an index, and the claim, like before, takes the slot first.
//
// Rows written before this migration hold '' in these columns; changeflowd assigns them to the
// configured `gitlab.project` and `gitlab.target_branch` at start-up
// (persistence::adopt_rows_without_repository). Until then (the assignment failed and waits for the
// next start-up) their GitLab calls fall back to the same two keys.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v7() {
  return {
      R"sql(
ALTER TABLE operation
  ADD COLUMN IF NOT EXISTS repository    VARCHAR(255) NOT NULL DEFAULT '' COMMENT 'GitLab project path of the change',
  ADD COLUMN IF NOT EXISTS target_branch VARCHAR(255) NOT NULL DEFAULT '' COMMENT 'branch the change merges into',
  ADD INDEX IF NOT EXISTS idx_operation_repository_mr (repository, mr_iid))sql",
      R"sql(
ALTER TABLE binding
  ADD COLUMN IF NOT EXISTS repository VARCHAR(255) NOT NULL DEFAULT '' AFTER subject_id,
  DROP INDEX IF EXISTS uk_binding_relationship,
  ADD UNIQUE KEY uk_binding_relationship (subject_id, repository, target_key))sql",
      R"sql(
ALTER TABLE binding_history
  ADD COLUMN IF NOT EXISTS repository VARCHAR(255) NOT NULL DEFAULT '' AFTER subject_id,
  DROP INDEX IF EXISTS idx_binding_history_relationship,
  ADD INDEX idx_binding_history_relationship (subject_id, repository, target_key, id))sql",
      R"sql(
ALTER TABLE merge_batch
  ADD COLUMN IF NOT EXISTS repository    VARCHAR(255) NOT NULL DEFAULT '' AFTER active_slot,
  ADD COLUMN IF NOT EXISTS target_branch VARCHAR(255) NOT NULL DEFAULT '' AFTER repository,
  DROP INDEX IF EXISTS uk_active_slot,
  ADD UNIQUE KEY uk_active_partition (repository, target_branch, active_slot))sql",
      R"sql(
ALTER TABLE merge_batch_request
  ADD COLUMN IF NOT EXISTS repository    VARCHAR(255) NOT NULL DEFAULT '' AFTER operation_id,
  ADD COLUMN IF NOT EXISTS target_branch VARCHAR(255) NOT NULL DEFAULT '' AFTER repository,
  ADD INDEX IF NOT EXISTS idx_request_partition (repository, target_branch, batch_id, created_at, id))sql",
  };
}

}  // namespace changeflow::persistence
