// Migration 6: who asked for each change.
//
// `requester` is the verified identity that submitted the operation (the token's account, or
// "anonymous" where anonymous submission is configured), written once by create_operation and never
// changed. It is what lets the user API answer "my changes" and show a change to the one who asked
// for it. Rows written before this migration keep NULL: nobody owns them by identity, so only
// callers permitted for their subject and operators see them. The index serves "my changes, newest
// first" from one range scan.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v6() {
  return {
      R"sql(
ALTER TABLE operation
  ADD COLUMN IF NOT EXISTS requester VARCHAR(160) NULL COMMENT 'verified identity that submitted it; NULL before migration 6',
  ADD INDEX IF NOT EXISTS idx_operation_requester (requester, created_at))sql",
  };
}

}  // namespace changeflow::persistence
