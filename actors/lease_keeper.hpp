#pragma once
// The instance lease: registers this instance, renews its lease by heartbeat
// (instance.lease_seconds, every third of it), and takes over operations whose owner's lease
// expired (guarded UPDATE that bumps lease_epoch: the old owner's fenced writes miss from then on).
// Taken rows go to the rehydrator for a paced resume. On a graceful stop the lease is released at
// once so peers take over without waiting for it to expire.

#include "actors/periodic_job.hpp"
#include "actors/rehydrator.hpp"
#include "runtime/services.hpp"

#include <caf/actor.hpp>

#include <chrono>
#include <memory>

namespace changeflow::actors {

class lease_keeper {
 public:
  lease_keeper(runtime::services& svc, rehydrator& rehydrate);
  ~lease_keeper();
  lease_keeper(const lease_keeper&) = delete;
  lease_keeper& operator=(const lease_keeper&) = delete;

  /// Registers (or re-registers) the instance row; blocks up to `timeout`. False when the database
  /// did not answer in time (start-up then fails: an unregistered instance would own nothing).
  bool register_now(std::chrono::milliseconds timeout);
  /// Starts the heartbeat and takeover ticks.
  void start();
  /// Stops the ticks.
  void stop();
  /// Marks the instance stopped (lease ends now); blocks up to `timeout`. False on failure (peers
  /// then take over when the lease expires instead).
  bool release_now(std::chrono::milliseconds timeout);

 private:
  runtime::services& svc_;
  rehydrator& rehydrate_;
  periodic_job ticker_;
};

}  // namespace changeflow::actors
