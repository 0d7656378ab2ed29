// Migration 11: a change and its revert name each other.
//
// A revert is an ordinary change (its own approval, MR and lifecycle) whose files restore what
// another, validated change replaced. `revert_of` is written once, when the revert is created;
// `reverted_by` on the original names its current revert and is written in the same transaction,
// by a guarded UPDATE of the original's row that carries the "reverted by" event through the
// staging columns (migration 3), so both timelines say so and the original's version moves. An
// original whose revert ended without taking effect (rejected, cancelled, closed before merging)
// may be reverted again: `reverted_by` then names the newer revert, the older one keeps its
// `revert_of`, and the original's timeline lists both.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v11() {
  return {
      R"sql(
ALTER TABLE operation
  ADD COLUMN IF NOT EXISTS revert_of   CHAR(36) NULL COMMENT 'the validated change this one reverts; set at creation',
  ADD COLUMN IF NOT EXISTS reverted_by CHAR(36) NULL COMMENT 'the current revert of this change')sql",
  };
}

}  // namespace changeflow::persistence
