// Migration 15: every active batch has an owner.
//
// Several instances run a batch coordinator each. A batch is driven by the instance that claimed
// it; a coordinator that starts (or runs a round) adopts only the active batches it owns, and takes
// over those whose owner's lease expired (a guarded UPDATE of owner_instance, like the takeover of
// operations). Without an owner, an instance that restarted adopted every active batch, also the
// ones a live peer was driving, and two coordinators approved and merged the same MR.

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v15() {
  return {
      R"sql(
ALTER TABLE merge_batch
  ADD COLUMN IF NOT EXISTS owner_instance VARCHAR(128) NULL COMMENT 'instance whose coordinator drives the batch'
    AFTER target_branch)sql",
  };
}

}  // namespace changeflow::persistence
