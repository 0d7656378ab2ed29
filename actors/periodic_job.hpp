#pragma once
// The one idiom of every periodic job of an instance (lease heartbeat, owner's inbox, timeout sweep,
// reconciliation, notification dispatch, idempotency cleanup, rehydration pacing):
//
//   a small CAF actor arms a timer; on each tick it reads the interval (hot configuration: a value
//   <= 0 pauses the job and is looked at again every second), starts ONE pass, and arms the next
//   tick only when that pass reported its end. Passes therefore never overlap on one instance and a
//   slow database never piles up work. A pass that made more work due (a delivery unblocked the
//   next one of its stream) asks for the next pass at once.
//
// The pass itself runs wherever its work belongs, usually one job on the database pool
// (`db_pass`); the actor never blocks. Stopping ends the timer; a pass already queued skips its
// work (db_pass checks the stop flag) and its report reaches nobody.

#include "persistence/db_pool.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace changeflow::actors {

/// How a pass reports its end: called exactly once, from any thread. `again`: run the next pass at
/// once instead of after the interval.
using pass_done = std::function<void(bool again)>;

struct periodic_spec {
  std::string name;  // for logs
  /// Read before every arming (hot configuration); <= 0 pauses the job.
  std::function<std::int64_t()> interval_ms;
  /// True: the first pass runs at start; false: after one interval.
  bool first_at_once = true;
  /// Starts one pass and eventually calls `done`. False when the pass could not be started (a full
  /// pool): `done` will not be called and the next try comes after the interval.
  std::function<bool(pass_done done)> start_pass;
};

class periodic_job {
 public:
  periodic_job() = default;
  ~periodic_job();
  periodic_job(const periodic_job&) = delete;
  periodic_job& operator=(const periodic_job&) = delete;

  void start(caf::actor_system& system, periodic_spec spec);
  /// Ends the timer; idempotent. A pass in flight finishes (db_pass skips work not yet begun).
  void stop();
  bool running() const { return static_cast<bool>(actor_); }
  /// Set once stop() ran; passes check it before doing work that was queued earlier.
  std::shared_ptr<const std::atomic<bool>> stop_flag() const { return stopped_; }

 private:
  caf::actor actor_;
  std::shared_ptr<std::atomic<bool>> stopped_ = std::make_shared<std::atomic<bool>>(false);
};

/// The common pass: `work` as one job on the database pool, skipped when `stopped` is set by then.
/// `work` returns `again` (see pass_done); an exception it throws is logged and ends the pass.
std::function<bool(pass_done)> db_pass(persistence::db_pool& pool, std::shared_ptr<const std::atomic<bool>> stopped,
                                       std::string name, std::function<bool(persistence::db_context&)> work);

}  // namespace changeflow::actors
