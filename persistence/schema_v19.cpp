// Migration 19: an idempotency record names the change its submission creates.
//
// A submission under an Idempotency-Key used to get an id derived from the key (a hash: random in
// the key order), so that a retry that takes over the key of a request that died re-creates the
// same change, not a second one. Random ids put every new change on a random page of each index
// keyed by the change's id; on a database with a long history that cost the keyed flow a fifth of
// its rate (docs/performance.md, "Time-ordered ids for keyed submissions"). Now the id is
// time-ordered, chosen when the key is first taken, and stored with the key: a takeover reuses the
// stored id. Records without one (from before this migration, or written by an instance not yet
// upgraded) keep the derived id.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v19() {
  return {
      "ALTER TABLE idempotency_record ADD COLUMN IF NOT EXISTS operation_id CHAR(36) NULL "
      "COMMENT 'the change a submission under this key creates; NULL: the id derived from the key'"};
}

}  // namespace changeflow::persistence
