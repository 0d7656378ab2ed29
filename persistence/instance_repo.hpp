#pragma once
// Instance registry and operation ownership. An instance owns the operations it drives while its
// lease (DB clock) is fresh; when a lease expires another instance takes the operations over with a
// guarded UPDATE that bumps lease_epoch, which fences the old owner's writes
// (transition_request::fence).

#include "persistence/operation_repo.hpp"
#include "persistence/result.hpp"
#include "persistence/session.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace changeflow::persistence {

/// Registers (or re-registers after a restart, bumping its epoch) and returns the instance epoch.
db_result<std::int64_t> register_instance(session s, const std::string& instance_id, int lease_seconds,
                                          const std::string& address = {});
/// Extends the lease to NOW(3) + lease_seconds; not_found when unregistered or stopped.
db_result<done> heartbeat(session s, const std::string& instance_id, int lease_seconds);
/// Clean shutdown: ends the lease now so peers take over at once.
db_result<done> mark_instance_stopped(session s, const std::string& instance_id);

struct taken_operation {
  std::string operation_id;
  std::int64_t lease_epoch = 0;
  std::int64_t version = 0;
};
/// Takes over up to `limit` non-terminal operations whose owner's lease expired (or which have no
/// live owner): one transaction, plain candidate read, guarded UPDATE that re-checks the expiry,
/// bumps lease_epoch and version, and records a timeline event. Returns what this call took.
db_result<std::vector<taken_operation>> take_over_expired(session s, const std::string& my_id, int limit);

/// Keyset paging by operation_id: pass the last id of the previous page ("" for the first).
db_result<std::vector<operation_row>> list_owned_nonterminal(session s, const std::string& owner,
                                                             const std::string& after_operation_id, int page_size);

}  // namespace changeflow::persistence
