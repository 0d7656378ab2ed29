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
#include <functional>
#include <memory>

namespace changeflow::actors {

class lease_keeper {
 public:
  lease_keeper(runtime::services& svc, rehydrator& rehydrate);
  ~lease_keeper();
  lease_keeper(const lease_keeper&) = delete;
  lease_keeper& operator=(const lease_keeper&) = delete;

  enum class registration { registered, failed, stop_requested };
  /// Registers (or re-registers) the instance row; blocks up to `timeout`. `failed` when the
  /// database refused or did not answer in time (start-up then fails: an unregistered instance would
  /// own nothing). `stop_asked` is asked about every 50 ms while the database has not answered; once
  /// it says yes the wait ends with `stop_requested` (the registration may still be in flight).
  registration register_now(std::chrono::milliseconds timeout, const std::function<bool()>& stop_asked = {});
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
