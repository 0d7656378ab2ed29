#pragma once
// The request actor: one per in-flight operation. Callers depend on this alias only.
//
// It owns the operation's state in memory while alive and writes every workflow step; writes from
// outside (callbacks, cancel, operators, the batch coordinator: docs/architecture.md) are guarded by
// the same version and followed by a nudge, after which it re-reads. For every event it
// asks the pure core (workflow::decide) what to do, persists the transition (guarded by version)
// BEFORE running the effects that follow it, runs external calls on the blocking pool, and keeps
// each wait as a stored deadline (next_wake_at) with a CAF timer as the in-memory copy. It exits
// when the operation no longer needs an actor (terminal, MERGED, or handed to the batch coordinator).

#include "messages/messages.hpp"
#include "persistence/operation_repo.hpp"
#include "runtime/services.hpp"
#include "workflow/decide.hpp"

#include <caf/typed_actor.hpp>

namespace changeflow::actors {

using request_actor = caf::typed_actor<caf::reacts_to<messages::wake>, caf::reacts_to<messages::external_reply>,
                                       caf::reacts_to<messages::persisted>, caf::reacts_to<messages::row_loaded>,
                                       caf::reacts_to<messages::row_changed>, caf::reacts_to<messages::gitlab_event>,
                                       caf::replies_to<messages::inspect_request>::with<messages::actor_snapshot>>;

/// Everything an actor starts from: the operation row as stored.
struct request_seed {
  workflow::operation_state op;
  std::string payload_json;
  /// Verified identity that submitted the operation; "" for rows older than the requester column.
  std::string requester;
  /// The GitLab project and target branch every GitLab call of the change uses.
  std::string repository;
  std::string target_branch;
  // Ownership (durability): the instance that may drive this operation and the lease epoch it holds.
  // Every transition the actor writes is fenced on both, so a paused old owner's writes miss after a
  // takeover. An empty owner means "created by this instance just now" (the submit path).
  std::string owner_instance;
  std::int64_t lease_epoch = 0;
  /// The row may have moved since it was read (the rehydrator's backlog waits for its pace): the
  /// actor reads its row before it acts, so an actor that ran and stopped meanwhile (a passivated
  /// wait) is not followed by one that repeats its step's call from the older row.
  bool read_first = false;
};

/// Passivation: true when an operation at `s` whose stored deadline is `wake_at_ms` needs no live
/// actor now. Only the wait for the approval decision qualifies, and only while its deadline is more
/// than `durability.passivate_beyond_seconds` away: everything that can move it brings an actor back
/// from the row (the callback and cancels through service::wake_actor, a peer's write through the
/// owner's inbox poll, the deadline through the sweep's stuck scan, which leaves such rows alone
/// until it has passed, and its timeout).
bool passivated_wait(workflow::step s, std::int64_t wake_at_ms, std::int64_t now_ms, std::int64_t beyond_seconds);

/// Counts a committed workflow transition to `to` (changeflow_transitions_total by phase): the
/// actor's own, and the one an approval decision writes in its place.
void count_committed_transition(metrics::registry& m, workflow::step to);

/// Builds the seed from a stored row (submit or rehydration).
request_seed seed_from_row(const persistence::operation_row& row, std::int64_t now_ms);

/// Spawns the actor and registers it; returns nullopt when one is already registered, when the row
/// is owned by another instance (that owner drives it; a non-owner never spawns a second writer), or
/// when the row is a passivated wait (passivated_wait: nothing for an actor to do until it moves).
/// A waiting step whose stored deadline (next_wake_at) lies ahead resumes when it falls due instead
/// of at once; every other step re-runs at once (each step reads remote state before acting).
std::optional<request_actor> spawn_request_actor(runtime::services& svc, request_seed seed);

}  // namespace changeflow::actors
