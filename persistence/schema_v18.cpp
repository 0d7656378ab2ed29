// Migration 18: the binding's (phase, updated_at) index is dropped.
//
// The transition trigger moves the binding's phase with every phase change of its operation (about
// six times per change), and each such UPDATE also rewrote this index's entry: `updated_at` moves
// with every write. No query reads the binding by phase: the binding is found by its relationship
// (subject, repository, target) or by its operation, and every listing by phase or age reads the
// operation table. Measured on the standard workload, the index cost the database about 4 % of its
// CPU per change (docs/performance.md).
//
// Without it the optimizer reads the submit's binding UPDATE (relationship AND `operation_id =` the
// bound change) through the shorter operation key, against the lock order of the submit and of the
// transition trigger: that UPDATE names its key (operation_repo.cpp, FORCE INDEX).

#include <string>
#include <vector>

namespace changeflow::persistence {

std::vector<std::string> schema_v18() {
  return {"ALTER TABLE binding DROP INDEX IF EXISTS idx_binding_phase_updated"};
}

}  // namespace changeflow::persistence
