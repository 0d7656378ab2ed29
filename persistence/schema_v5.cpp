// Migration 5: every batch member counts the batches it was claimed into.
//
// The counter lives on `operation`, not on `merge_batch_request`: a member that leaves the batch
// path (failed alone, bound reached) loses its waiting row, but its count must stay readable for
// the API, the operator and the timeline's "n of max attempts". It is written only by the bulk
// BATCH_WAITING -> BATCH_CLAIMED move, so members deferred for a same-file conflict (never carried
// by a batch MR) and operations closed while waiting are not counted.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v5() {
  return {
      R"sql(
ALTER TABLE operation
  ADD COLUMN IF NOT EXISTS batch_attempts INT NOT NULL DEFAULT 0
    COMMENT 'batches this operation was claimed into since its admission')sql",
  };
}

}  // namespace changeflow::persistence
