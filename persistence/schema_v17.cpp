// Migration 17: a deploy report that came before MERGED is marked on the change's row.
//
// The deploy pipeline can call back before the service has committed MERGED (the merge was
// answered, the write not yet made). Its delivery is recorded and answered OUT_OF_ORDER, and the
// writer of MERGED then validates the change from it. That writer used to ask the recorded
// deliveries after every MERGED write: one more round trip and three statements per change, almost
// always to learn that nothing was there. Now every unit that records a deploy report for a change
// not yet MERGED (in the same transaction, under the change's row lock) sets `deploy_reported`, and
// the MERGED write reads its own committed row in its round trip: only a row carrying the mark is
// checked. The row lock orders the two: a report committed before the MERGED UPDATE is on the row
// that UPDATE wrote; a report after it finds MERGED and validates the change itself.
//
// Changes in flight when this migration runs may have had a report recorded before it, unmarked:
// every change that has not ended and has a report recorded for its MR in its project is marked
// (a mark too many costs its MERGED writer one check; a mark missing would leave the change to
// reconciliation).

#include "persistence/sql_util.hpp"

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v17() {
  return {
      R"sql(
ALTER TABLE operation
  ADD COLUMN IF NOT EXISTS deploy_reported TINYINT(1) NOT NULL DEFAULT 0
    COMMENT '1: a deploy report for this change was recorded before it was MERGED (the MERGED writer checks them)')sql",
      "UPDATE operation o SET o.deploy_reported = 1, o.updated_at = o.updated_at WHERE o.deploy_reported = 0 "
      "AND o.mr_iid IS NOT NULL AND o.phase NOT IN (" +
          detail::terminal_phase_list() +
          ") AND EXISTS (SELECT 1 FROM deploy_callback d WHERE d.mr_iid = o.mr_iid AND d.project = o.repository)",
  };
}

}  // namespace changeflow::persistence
