#pragma once
// Group commit of transitions: the transitions of many actors that are ready at the same moment are
// committed together (persistence::transition_group: one round trip, one transaction, one fsync),
// each still guarded by its own version check and each caller told its own outcome.
//
// Callers hand a transition and a completion; the committer queues them and keeps at most
// `max_committers` jobs on the database pool, each of which takes everything queued (up to
// `max_group`) and commits it as one group, then takes what arrived meanwhile. While one group
// commits, the next one forms; a transition that finds the committers idle is committed at once,
// alone, so a quiet system pays no latency for grouping. The completion runs on the database
// thread with its connection (the caller can follow up in the same job, as a single transition's
// job did).
//
// Units (a callback's record and flip, persistence::group_unit) join the same groups: a callback
// that arrives while transitions are committing shares their commit instead of paying its own.

#include "persistence/db_pool.hpp"
#include "persistence/operation_repo.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace changeflow::persistence {

struct transition_committer_stats {
  std::uint64_t groups = 0;   // commits of two or more members (transitions and units)
  std::uint64_t grouped = 0;  // transitions committed in those groups
  std::uint64_t units = 0;    // units handed to a group or run alone (group_unit)
  std::uint64_t alone = 0;    // transitions committed alone
  /// Groups that failed as a whole (a deadlock, a lost connection, an answer lost after the
  /// COMMIT): their members ran again alone.
  std::uint64_t failed_groups = 0;
  /// Groups whose answer was lost after their COMMIT and whose receipt gave every member its
  /// outcome instead (group_run::recovered); not among failed_groups.
  std::uint64_t recovered_groups = 0;
  std::size_t queued = 0;         // waiting for a committer now (read from the queue by stats())
  std::size_t largest_group = 0;  // since start
  /// Wall time the committers spent on what they took from the queue (its SQL round trip, the
  /// completions after it), microseconds since start. Against the elapsed time it says how close
  /// the committers are to being the bottleneck: one committer near 100 % limits throughput.
  std::uint64_t busy_us = 0;
  /// The part of busy_us spent after the groups' round trips, telling the actors and finishing the
  /// units (the connection idle meanwhile).
  std::uint64_t completions_us = 0;
};

class transition_committer {
 public:
  /// The outcome, and for a transition that landed in a group its row as committed (read in the
  /// group's own transaction); null when it ran alone or did not land.
  using completion = std::function<void(db_context&, const db_result<std::int64_t>&, const operation_row*)>;

  /// `max_group` 1 commits every transition alone (no grouping). `queue_capacity` bounds the
  /// transitions waiting for a committer (a full queue refuses, as the pool's own queue does).
  /// `lose_answer` is a fault for tests, asked once per group of two or more members and once per
  /// transition committed alone: true makes that commit lose its answer after its COMMIT
  /// (persistence::transition_group, persistence::transition). `receipts`: each
  /// group writes its receipt (group_run::receipt_slot), so a lost answer is recovered from it;
  /// false (tests) leaves a lost answer to the members run alone, as a receipt that cannot be
  /// read does.
  transition_committer(db_pool& pool, std::size_t max_group, std::size_t max_committers, std::size_t queue_capacity,
                       std::function<bool()> lose_answer = {}, bool receipts = true);
  ~transition_committer();
  transition_committer(const transition_committer&) = delete;
  transition_committer& operator=(const transition_committer&) = delete;

  /// Queues one transition. False when the queue is full or the pool refused a committer job;
  /// `done` is then destroyed unrun (its captures' destructors answer the caller, as a refused pool
  /// job's do). Otherwise `done` runs exactly once, or is destroyed unrun if the pool drops the job.
  bool submit(transition_request req, completion done);

  /// Queues a unit (persistence::group_unit) to join the next group: it commits with the
  /// transitions ready at the same moment, or alone when nothing else is. False as for submit, and
  /// also when units already fill half the queue (the rest stays for the actors' transitions, and
  /// the caller's own path answers the overload); the unit is then destroyed unrun. Otherwise its
  /// `finish` runs exactly once, or the unit is destroyed unrun if the pool drops the job.
  bool submit_unit(std::shared_ptr<group_unit> unit);

  transition_committer_stats stats() const;

 private:
  struct pending {
    std::uint64_t seq = 0;
    transition_request req;
    completion done;
    std::shared_ptr<group_unit> unit;  // set for a unit (req and done unused)
  };
  bool enqueue(pending p);
  /// After its group: finished here when the group carried it out, else its work alone goes to
  /// the pool (here when the pool refuses).
  void settle_unit(const std::shared_ptr<group_unit>& unit, db_context& ctx, bool joined);
  struct state;
  /// Queues one committer job on the pool (its count already taken); false when the pool refuses.
  bool launch();
  void commit_loop(db_context& ctx);
  /// One committer job is gone without finishing (dropped unrun, or it could not hand over): it no
  /// longer counts, and when no committer is left the queued transitions are dropped unrun.
  static void abandon(const std::shared_ptr<state>& st);
  static void sweep_receipts(db_context& ctx);

  db_pool& pool_;
  std::size_t max_group_;
  std::size_t max_committers_;
  std::size_t capacity_;
  std::function<bool()> lose_answer_;
  bool receipts_ = true;
  std::shared_ptr<state> state_;
};

}  // namespace changeflow::persistence
