#pragma once
// Rehydration: after a start or a takeover, every operation this instance owns gets its
// request actor back, spawned from the stored row. The resume is paced (rehydrate.rate_per_second)
// so a backlog of thousands does not hit GitLab and the approval system all at once; readiness
// reports "rehydrating N/M" until the start-up backlog is resumed.
//
// Loading runs on the database pool (paged reads); spawning runs on a periodic job (the pacer, actors/periodic_job.hpp)
// that takes rows from a mutex-protected queue on each tick. The queue is shared with the lease
// keeper (takeovers) and the sweeper (owned operations found without an actor).

#include "actors/periodic_job.hpp"
#include "persistence/operation_repo.hpp"
#include "runtime/services.hpp"

#include <caf/actor.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace changeflow::actors {

class rehydrator {
 public:
  explicit rehydrator(runtime::services& svc);
  ~rehydrator();
  rehydrator(const rehydrator&) = delete;
  rehydrator& operator=(const rehydrator&) = delete;

  /// Starts the pacer and the start-up load: every non-terminal operation this instance owns
  /// (paged), then those whose owner's lease expired (taken over with the guarded UPDATE).
  void start();
  /// Queues rows for a paced resume (takeovers, stuck operations). Thread-safe.
  void enqueue(std::vector<persistence::operation_row> rows);
  /// "rehydrating N/M" until the start-up backlog is resumed; nullopt afterwards.
  std::optional<std::string> not_ready_reason() const;
  /// True once the start-up load finished and its rows were all resumed.
  bool initial_done() const;
  std::size_t queued() const;
  /// Stops the pacer (queued rows stay in the database and are resumed by the next owner).
  void stop();

  struct shared_state;

 private:
  runtime::services& svc_;
  std::shared_ptr<shared_state> shared_;
  periodic_job pacer_;
};

}  // namespace changeflow::actors
