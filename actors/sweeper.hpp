#pragma once
// Periodic durability jobs (actors/periodic_job.hpp), SQL on the database pool:
//  - the owner's inbox poll: operations this instance owns whose row changed without its actor
//    knowing (an approval callback applied by a peer instance, an operator): the live actor is told
//    to reload, or an actor is spawned when none lives and the step needs one;
//  - the timeout sweep: APPROVAL_SENT past its stored deadline (+ grace) -> APPROVAL_TIMEOUT, a MERGED
//    step past timeouts.deploy_wait_seconds -> DEPLOY_TIMEOUT, both through the guarded transition;
//    owned operations unchanged for durability.stuck_after_seconds with no live actor get one again.
// Nothing stays "processing" forever: every in-progress step either has a live actor (whose waits
// end in an explicit state by poll.timeout_ms) or is moved by this sweep.

#include "actors/periodic_job.hpp"
#include "actors/rehydrator.hpp"
#include "runtime/services.hpp"

#include <caf/actor.hpp>

#include <memory>

namespace changeflow::actors {

class sweeper {
 public:
  sweeper(runtime::services& svc, rehydrator& rehydrate);
  ~sweeper();
  sweeper(const sweeper&) = delete;
  sweeper& operator=(const sweeper&) = delete;

  void start();
  void stop();

  struct shared_state;

 private:
  runtime::services& svc_;
  rehydrator& rehydrate_;
  std::shared_ptr<shared_state> shared_;
  periodic_job inbox_;
  periodic_job sweep_;
};

}  // namespace changeflow::actors
