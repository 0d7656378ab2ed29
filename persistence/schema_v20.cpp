// Migration 20: the group commit's receipt.
//
// A group commit whose connection drops after its COMMIT leaves its committer not knowing whether
// the group committed, nor which of its members did what. Each group now writes, inside its own
// transaction, one row of this table: the committer's slot, the group's sequence number and its
// answer (the transitions whose guard matched, each unit's verdict). After a lost answer the
// committer reads its slot's row with a locking read, which waits until the group's transaction has
// ended: the sequence number says whether it committed, and the answer gives every member the
// outcome the lost answer would have given it. One row per committer slot, overwritten by each of
// its groups.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v20() {
  return {R"sql(
CREATE TABLE IF NOT EXISTS group_receipt (
  slot        VARCHAR(64)  NOT NULL COMMENT 'a committer of one process: its process token and slot number',
  seq         BIGINT       NOT NULL COMMENT 'the last group this slot committed',
  answer      MEDIUMTEXT   NOT NULL COMMENT 'landed transitions (id,id,), a bar, then one verdict digit per unit',
  written_at  DATETIME(3)  NOT NULL,
  PRIMARY KEY (slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4)sql"};
}

}  // namespace changeflow::persistence
