#pragma once
// operation_id -> live request actor, with a summary each actor refreshes on every transition so the
// console can list thousands of actors without asking each one.
//
// A mutex-protected table rather than an actor: it is read on every callback and status request from
// HTTP and database threads, and a lookup through an extra actor hop would add latency to each of
// those without adding any ordering guarantee the request actors need.

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace changeflow::actors {

struct live_summary {
  std::string operation_id;
  int step = 0;
  std::string flow;
  std::int64_t version = 0;
  std::int64_t mr_iid = 0;
  std::string repository;         // GitLab project path of the change
  std::string mr_sha;             // MR head last seen: a webhook's pipeline without an MR is routed by it
  std::int64_t next_wake_ms = 0;  // epoch ms, 0 = none
  int polls = 0;
  int merge_attempts = 0;
  std::int64_t spawned_ms = 0;
  std::int64_t step_entered_ms = 0;
  bool busy = false;
  std::string last_note;
  std::string last_error;
};

class registry {
 public:
  /// False when an actor is already registered for this operation (the caller must not spawn twice).
  bool put(const std::string& id, caf::actor actor, live_summary summary);
  void update(const live_summary& summary);
  /// Removes the entry only while it is `who`'s: an actor leaving must not remove the actor that
  /// took its place.
  bool remove_if_is(const std::string& id, const caf::actor_addr& who);
  std::optional<caf::actor> find(const std::string& id) const;
  /// Finds the actor and hands it to `send` under the table's lock, so the message is in its mailbox
  /// before the actor can leave the table: an actor that removes itself and then sends itself its
  /// last message reads every message sent through here before that one (a mailbox keeps the order
  /// of its enqueues). False, and nothing sent, when no actor is registered.
  bool send_if_present(const std::string& id, const std::function<void(const caf::actor&)>& send) const;
  std::optional<live_summary> summary(const std::string& id) const;
  std::vector<live_summary> list(const std::function<bool(const live_summary&)>& keep, std::size_t limit) const;
  std::size_t size() const;
  /// Live actors per step code (for the gauge by phase).
  std::unordered_map<int, std::size_t> count_by_step() const;

 private:
  struct entry {
    caf::actor actor;
    live_summary summary;
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, entry> entries_;
};

}  // namespace changeflow::actors
