#include "persistence/transition_committer.hpp"

#include "base/ids.hpp"
#include "base/log.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

namespace changeflow::persistence {

struct transition_committer::state {
  mutable std::mutex mutex;
  std::deque<pending> queue;
  std::size_t committers = 0;    // committer jobs queued or running on the pool
  std::size_t queued_units = 0;  // units among the queued
  std::uint64_t next_seq = 0;
  transition_committer_stats stats;
  // Receipts (group_run::receipt_slot): this process's token, which slots a committer holds now
  // (a committer takes the first free one for its loop), and each group's number, growing across
  // the slots.
  std::string receipt_token = ids::new_uuid();
  std::vector<bool> slot_taken;
  std::uint64_t next_group = 0;
  bool receipts_swept = false;
};

transition_committer::transition_committer(db_pool& pool, std::size_t max_group, std::size_t max_committers,
                                           std::size_t queue_capacity, std::function<bool()> lose_answer, bool receipts)
    : pool_(pool),
      max_group_(std::max<std::size_t>(1, max_group)),
      max_committers_(std::max<std::size_t>(1, max_committers)),
      capacity_(std::max<std::size_t>(1, queue_capacity)),
      lose_answer_(std::move(lose_answer)),
      receipts_(receipts),
      state_(std::make_shared<state>()) {}

transition_committer::~transition_committer() {
  std::deque<pending> dropped;
  {
    std::lock_guard lock(state_->mutex);
    dropped.swap(state_->queue);
  }
  // `dropped` is destroyed here, outside the lock: the completions' captures answer their callers.
}

void transition_committer::abandon(const std::shared_ptr<state>& st) {
  std::deque<pending> dropped;
  {
    std::lock_guard lock(st->mutex);
    if (st->committers > 0) --st->committers;
    // A committer still running takes the queue; with none left, nobody would.
    if (st->committers == 0) {
      dropped.swap(st->queue);
      st->queued_units = 0;
    }
  }
  // `dropped` is destroyed here, outside the lock: the completions' captures answer their callers.
}

bool transition_committer::submit(transition_request req, completion done) {
  pending p;
  p.req = std::move(req);
  p.done = std::move(done);
  return enqueue(std::move(p));
}

bool transition_committer::submit_unit(std::shared_ptr<group_unit> unit) {
  pending p;
  p.unit = std::move(unit);
  return enqueue(std::move(p));
}

bool transition_committer::enqueue(pending p) {
  bool start = false;
  std::uint64_t seq = 0;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->queue.size() >= capacity_) return false;
    if (p.unit && state_->queued_units >= std::max<std::size_t>(1, capacity_ / 2)) return false;
    seq = ++state_->next_seq;
    p.seq = seq;
    state_->queued_units += p.unit ? 1 : 0;
    state_->queue.push_back(std::move(p));
    if (state_->committers < max_committers_) {
      ++state_->committers;
      start = true;
    }
  }
  if (!start) return true;  // a running committer takes it with its next group
  if (launch()) return true;
  pending mine;
  std::deque<pending> stranded;
  {
    std::lock_guard lock(state_->mutex);
    --state_->committers;
    if (state_->committers > 0) return true;  // a running committer takes ours with its next group
    // No committer is left: take ours back (the caller handles the refusal) and drop the others
    // that counted on the job that could not start; their completions' guards answer them.
    auto it = std::find_if(state_->queue.begin(), state_->queue.end(), [&](const pending& p) { return p.seq == seq; });
    if (it == state_->queue.end()) return true;  // a committer that has ended since took ours: it ran
    mine = std::move(*it);
    state_->queue.erase(it);
    stranded.swap(state_->queue);
    state_->queued_units = 0;
  }
  mine.done = nullptr;  // destroyed unrun before the caller's refusal path runs
  mine.unit.reset();
  return false;
}

namespace {
/// A unit's finish; an exception escaping it (a bug) is logged and goes no further.
void finish_unit(group_unit& u, db_context& ctx, bool joined) {
  try {
    u.finish(ctx, joined);
  } catch (const std::exception& e) {
    log::error("transition_committer.unit_failed", {{"operation_id", u.operation_id}, {"error", e.what()}});
  }
}
}  // namespace

bool transition_committer::launch() {
  auto guard = std::make_shared<unrun_guard>();
  std::weak_ptr<state> weak = state_;
  guard->on_unrun = [weak] {
    if (auto st = weak.lock()) abandon(st);
  };
  if (pool_.try_submit([this, guard](db_context& ctx) {
        guard->ran = true;
        commit_loop(ctx);
      })) {
    return true;
  }
  guard->ran = true;  // refused, not dropped: the caller handles it
  return false;
}

void transition_committer::commit_loop(db_context& ctx) {
  // However this job ends, it no longer counts as a committer: an exception escaping it (a bug; the
  // pool logs and counts it) must not leave the queue without anyone to take it. What is still
  // queued then is handed to a fresh committer job.
  struct leave_guard {
    transition_committer& self;
    bool normal = false;
    ~leave_guard() {
      if (normal) return;
      bool restart = false;
      {
        std::lock_guard lock(self.state_->mutex);
        restart = !self.state_->queue.empty() && self.state_->committers == 1;
        if (!restart) --self.state_->committers;
      }
      if (restart && !self.launch()) abandon(self.state_);
    }
  } leave{*this};
  // This loop's receipt slot: one row of group_receipt per slot, overwritten by each group.
  std::size_t slot = 0;
  bool sweep = false;
  {
    std::lock_guard lock(state_->mutex);
    auto& taken = state_->slot_taken;
    slot = static_cast<std::size_t>(std::find(taken.begin(), taken.end(), false) - taken.begin());
    if (slot == taken.size()) taken.push_back(false);
    taken[slot] = true;
    sweep = !std::exchange(state_->receipts_swept, true);
  }
  struct slot_guard {
    state& st;
    std::size_t slot;
    ~slot_guard() {
      std::lock_guard lock(st.mutex);
      st.slot_taken[slot] = false;
    }
  } release_slot{*state_, slot};
  const std::string receipt_slot = state_->receipt_token + "/" + std::to_string(slot);
  // The receipts of processes that ended stay behind, one row per slot: the first loop of a process
  // drops those not written for a day (a receipt matters for the moments after a lost answer).
  if (sweep && receipts_) sweep_receipts(ctx);
  const auto complete = [&ctx](pending& p, const db_result<std::int64_t>& r, const operation_row* row) {
    try {
      p.done(ctx, r, row);
    } catch (const std::exception& e) {
      log::error("transition_committer.completion_failed", {{"operation_id", p.req.operation_id}, {"error", e.what()}});
    }
  };
  for (;;) {
    std::vector<pending> group;
    std::uint64_t group_number = 0;  // the group's number in its receipt (group_run::receipt_seq)
    {
      std::lock_guard lock(state_->mutex);
      if (state_->queue.empty()) {
        --state_->committers;
        leave.normal = true;
        return;
      }
      group_number = ++state_->next_group;
      const std::size_t n = std::min(max_group_, state_->queue.size());
      group.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        group.push_back(std::move(state_->queue.front()));
        state_->queue.pop_front();
        if (group.back().unit) --state_->queued_units;
      }
      std::size_t units = 0;
      for (const auto& p : group) units += p.unit ? 1 : 0;
      state_->stats.units += units;
      if (n >= 2) {
        ++state_->stats.groups;
        state_->stats.grouped += n - units;
        state_->stats.largest_group = std::max(state_->stats.largest_group, n);
      } else if (units == 0) {
        ++state_->stats.alone;
      }
    }
    // Counted when this iteration ends, whichever way it ends; the completions' share from the
    // moment a group's round trip has answered.
    struct busy_clock {
      state& st;
      std::chrono::steady_clock::time_point began = std::chrono::steady_clock::now();
      std::optional<std::chrono::steady_clock::time_point> completions_began;
      ~busy_clock() {
        const auto now = std::chrono::steady_clock::now();
        auto us = [](auto d) {
          return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
        };
        std::lock_guard lock(st.mutex);
        st.stats.busy_us += us(now - began);
        if (completions_began) st.stats.completions_us += us(now - *completions_began);
      }
    } busy{*state_};
    if (group.size() == 1 && group.front().unit) {
      finish_unit(*group.front().unit, ctx, false);
      continue;
    }
    if (group.size() == 1) {
      std::optional<operation_row> row;
      const bool lose = lose_answer_ && lose_answer_();
      auto r = transition(ctx, group.front().req, group.front().req.want_row ? &row : nullptr, lose);
      complete(group.front(), r, row ? &*row : nullptr);
      continue;
    }
    std::vector<transition_request> reqs;
    std::vector<pending*> transitions;
    std::vector<group_unit*> units;
    std::vector<std::shared_ptr<group_unit>> held;
    for (auto& p : group) {
      if (p.unit) {
        units.push_back(p.unit.get());
        held.push_back(p.unit);
      } else {
        reqs.push_back(p.req);
        transitions.push_back(&p);
      }
    }
    std::vector<std::optional<operation_row>> rows;
    group_run run;
    run.lose_answer_after_commit = lose_answer_ && lose_answer_();
    if (receipts_) run.receipt_slot = receipt_slot;
    run.receipt_seq = group_number;
    auto results = transition_group(ctx, reqs, &rows, units, run);
    busy.completions_began = std::chrono::steady_clock::now();
    if (run.failed && run.recovered) {
      {
        std::lock_guard lock(state_->mutex);
        ++state_->stats.recovered_groups;
      }
      log::warn("transition_committer.group_answer_recovered", {{"members", static_cast<std::int64_t>(group.size())},
                                                                {"code", run.failed->code},
                                                                {"error", run.failed->message}});
    } else if (run.failed) {
      {
        std::lock_guard lock(state_->mutex);
        ++state_->stats.failed_groups;
      }
      log::warn("transition_committer.group_failed", {{"members", static_cast<std::int64_t>(group.size())},
                                                      {"code", run.failed->code},
                                                      {"error", run.failed->message}});
    }
    // The actors' outcomes first: a unit that finishes alone must not hold them back.
    for (std::size_t i = 0; i < transitions.size(); ++i)
      complete(*transitions[i], results[i], rows[i] ? &*rows[i] : nullptr);
    for (std::size_t i = 0; i < held.size(); ++i) settle_unit(held[i], ctx, run.joined[i]);
  }
}

void transition_committer::sweep_receipts(db_context& ctx) {
  auto swept = sweep_group_receipts(ctx);
  if (!swept.ok()) log::warn("transition_committer.receipt_sweep_failed", {{"error", swept.error.message}});
}

void transition_committer::settle_unit(const std::shared_ptr<group_unit>& unit, db_context& ctx, bool joined) {
  bool settled = false;
  try {
    settled = joined && unit->settled && unit->settled();
  } catch (const std::exception& e) {
    log::error("transition_committer.unit_failed", {{"operation_id", unit->operation_id}, {"error", e.what()}});
  }
  if (settled) return finish_unit(*unit, ctx, true);
  const auto lane = unit->callback ? db_pool::lane::reserved : db_pool::lane::normal;
  if (pool_.try_submit([unit, joined](db_context& c) { finish_unit(*unit, c, joined); }, lane)) return;
  finish_unit(*unit, ctx, joined);
}

transition_committer_stats transition_committer::stats() const {
  std::lock_guard lock(state_->mutex);
  auto out = state_->stats;
  out.queued = state_->queue.size();
  return out;
}

}  // namespace changeflow::persistence
