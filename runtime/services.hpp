#pragma once
// The process context: everything a request actor, a periodic job or a use case needs from the
// process, passed explicitly (no globals).

#include "base/worker_pool.hpp"
#include "clients/external_context.hpp"
#include "config/store.hpp"
#include "effects/external_calls.hpp"
#include "metrics/registry.hpp"
#include "persistence/db_pool.hpp"
#include "persistence/transition_committer.hpp"
#include "workflow/decide.hpp"

#include <caf/actor_system.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace changeflow::actors {
class registry;  // actors/registry.hpp: the live request actors (this folder does not depend on actors/)
}  // namespace changeflow::actors

namespace changeflow::runtime {

using external_pool = worker_pool<clients::external_context>;

struct services {
  caf::actor_system* system = nullptr;
  config::store* config = nullptr;
  persistence::db_pool* db = nullptr;
  /// The request actors' transitions, committed in groups on `db` (persistence/transition_committer).
  /// Null: each transition is its own job on `db` (in-process tests that drive the pool by hand).
  persistence::transition_committer* transitions = nullptr;
  external_pool* external = nullptr;
  metrics::registry* metrics = nullptr;
  actors::registry* actors = nullptr;
  std::string instance_id;
  /// Called after a write of this instance moved an operation's row (the actor's transitions, the
  /// approval and deploy callbacks, cancels and operator actions through service::wake_actor, the
  /// batch coordinator's jobs for their members), from the thread that wrote it: status waiters
  /// (service/status_read) re-read that change at once and its kept row is dropped. Empty: nobody
  /// reads. Writers that do not call it are caught by the waiters' re-check and by the kept rows'
  /// bound (http.status_cache_ms).
  std::function<void(const std::string& operation_id)> row_written;
  /// As row_written, with the row as that write committed it (read inside the write's own
  /// transaction, as a group commit does): a status row kept for polling clients is replaced by it
  /// instead of dropped, so their next read needs no query. `found_version` is the version the write
  /// found (0: the one before the row's, a write of one version). Empty: row_written is called instead.
  std::function<void(const persistence::operation_row& row, std::int64_t found_version)> row_written_as;
  /// A count of this instance's writes so far, taken before a creation, and the created row with it:
  /// the status reads keep the row for the change's first poll unless a write of this instance came
  /// after the count. Empty: nobody reads.
  std::function<std::uint64_t()> write_mark;
  std::function<void(const persistence::operation_row& row, std::uint64_t mark)> row_created;
  /// Runs one external call of a request actor on an external-pool thread. `run_call` (the real
  /// clients); in-process actor tests put scripted external systems here.
  std::function<messages::call_reply(clients::external_context&, const config::snapshot&, const messages::call_request&,
                                     const effects::call_context&)>
      run_external = effects::run_call;
  /// Wall clock in epoch milliseconds; injected so tests can control time.
  std::function<std::int64_t()> now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
};

/// The workflow settings in force in a config snapshot (read per decision: hot reload applies to the
/// next decision of every actor).
workflow::settings workflow_settings_from(const config::snapshot& snap);
/// The tiered poll schedule of the poll.* settings (changes and batches alike).
workflow::poll_schedule poll_schedule_from(const config::poll_settings& poll);
/// The same for a change of `repository`: when it has a webhook_secret, GitLab's hooks end the
/// waits, and polling slows to poll.webhook_interval_ms as the fallback for a lost hook.
workflow::settings workflow_settings_from(const config::snapshot& snap, const std::string& repository);
/// Slows `polls` to poll.webhook_interval_ms when `repository` has a webhook_secret (and the key
/// is > 0); the timeout stays, so a wait still ends when it would have.
void apply_webhook_interval(workflow::poll_schedule& polls, const config::snapshot& snap,
                            const std::string& repository);

}  // namespace changeflow::runtime
