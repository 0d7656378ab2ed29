#pragma once
// Durability queries: the owner's poll for rows changed behind its actors' backs, the
// timeout sweeps, and the stuck-operation scan. Every write goes through the guarded transition
// (persistence::transition), so a sweep racing an actor or a peer's sweep loses cleanly (preempted).

#include "persistence/operation_repo.hpp"
#include "persistence/result.hpp"
#include "persistence/session.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace changeflow::persistence {

struct owned_change {
  std::string operation_id;
  workflow::step step = workflow::step::APPROVAL_SENDING;
  std::int64_t version = 0;
  std::int64_t next_wake_at_ms = 0;  // 0 when the row has none
};

/// Non-terminal operations owned by `owner` whose row changed within the last `lookback_ms` (DB
/// clock). The owner compares the versions with its live actors: a newer row means someone else
/// wrote it (a callback that arrived at a peer instance, an operator) and the actor must reload.
db_result<std::vector<owned_change>> list_owned_changed_since(session s, const std::string& owner,
                                                              std::int64_t lookback_ms, int limit);

/// Non-terminal operations owned by `owner` whose row has not changed for `older_than_s` seconds:
/// candidates for a new actor when none is live (the caller checks its registry). Keyset paging by
/// operation_id (pass the last id of the previous page, "" to start over), so successive sweeps walk
/// the whole set instead of re-reading the same oldest rows.
db_result<std::vector<operation_row>> list_owned_unchanged(session s, const std::string& owner, int older_than_s,
                                                           const std::string& after_operation_id, int limit);

struct overdue_operation {
  std::string operation_id;
  workflow::step step = workflow::step::APPROVAL_SENDING;
  std::int64_t version = 0;
  std::string owner_instance;
};

/// APPROVAL_SENT rows whose stored deadline (next_wake_at) passed more than `grace_s` ago: their
/// actor should have timed them out and did not (no actor anywhere).
db_result<std::vector<overdue_operation>> list_approval_overdue(session s, int grace_s, int limit);

/// Rows in a MERGED step still waiting for the deploy confirmation (not yet DEPLOY_TIMEOUT) that
/// entered it more than `wait_s` seconds ago.
db_result<std::vector<overdue_operation>> list_deploy_overdue(session s, int wait_s, int limit);

}  // namespace changeflow::persistence
