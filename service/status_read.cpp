#include "service/status_read.hpp"

#include "actors/registry.hpp"

#include "base/log.hpp"
#include "workflow/transitions.hpp"

#include <algorithm>
#include <string_view>
#include <unordered_set>
#include <utility>

namespace changeflow::service {

namespace {

using clock = std::chrono::steady_clock;

/// A wait's deadline is honoured to this granularity: the re-check job ticks at least this often
/// while anyone waits.
constexpr std::int64_t deadline_tick_ms = 50;

std::int64_t ms_until(clock::time_point t, clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count();
}

status_view failed_view(status_outcome o, persistence::db_error e = {}) {
  status_view v;
  v.outcome = o;
  v.error = std::move(e);
  return v;
}

}  // namespace

bool immutable_step(workflow::step s) {
  auto p = workflow::phase_of(s);
  if (!workflow::is_reappliable(p) || p == workflow::phase::VALIDATED) return false;
  return workflow::allowed_targets(s, workflow::actor_kind::operator_only).empty();
}

struct status_reads::waiter {
  std::string operation_id;
  bool timeline = false;
  bool waits = false;                 // false: a plain read, answered after its first read
  std::optional<std::int64_t> since;  // set by the first read when the caller gave none
  clock::time_point deadline;
  bool armed = false;    // the first read is done and the caller may see the change
  bool dirty = false;    // a signal came while unarmed or while a read was in flight: read again
  bool reading = false;  // a targeted re-read is queued or running
  bool done = false;
  status_answer answer;

  /// Under the owner's mutex.
  bool moved(const persistence::operation_row& row) const {
    return (since && row.version > *since) || workflow::is_terminal(row.phase);
  }
};

status_reads::status_reads(runtime::services& svc, persistence::db_pool& reads, std::size_t max_rows)
    : svc_(svc), reads_(reads), ended_(max_rows), kept_(max_rows), written_at_(max_rows) {}

status_reads::~status_reads() {
  stop();
}

void status_reads::start() {
  actors::periodic_spec spec;
  spec.name = "status_wait_recheck";
  spec.interval_ms = [this] { return next_tick_ms(); };
  spec.first_at_once = false;
  auto stopped = job_.stop_flag();
  spec.start_pass = [this, stopped](actors::pass_done done) {
    {
      std::lock_guard lock(mutex_);
      if (waiters_.empty()) return false;  // nothing to look at: no job, next tick after the interval
    }
    return reads_.try_submit([this, stopped, done](persistence::db_context& db) {
      bool again = false;
      if (!*stopped) {
        try {
          again = recheck_pass(db);
        } catch (const std::exception& e) {
          log::warn("periodic.pass_failed", {{"job", "status_wait_recheck"}, {"error", e.what()}});
        }
      }
      done(again && !*stopped);
    });
  };
  job_.start(*svc_.system, std::move(spec));
}

void status_reads::stop() {
  job_.stop();
}

std::size_t status_reads::waiting() const {
  std::lock_guard lock(mutex_);
  return waiters_.size();
}

std::size_t status_reads::cached() const {
  std::lock_guard lock(mutex_);
  return ended_.size();
}

std::size_t status_reads::kept_in_flight() const {
  std::lock_guard lock(mutex_);
  return kept_.size();
}

std::uint64_t status_reads::write_mark() const {
  std::lock_guard lock(mutex_);
  return writes_;
}

void status_reads::created(const persistence::operation_row& row, std::uint64_t mark) {
  keep(row, mark);
}

void status_reads::keep_row(row_ptr row, clock::time_point now, std::chrono::milliseconds ttl) {
  // A few at a time: after a lull every kept row may have expired, and freeing them all in one call
  // would stall every reader on the lock. A kept row past its time is never answered (kept()).
  kept_.drop_oldest_while([&](const kept_row& k) { return now - k.read_at >= ttl; }, 2);
  const auto& id = row->operation_id;
  kept_.put(id, kept_row{std::move(row), now});
}

status_reads::row_ptr status_reads::kept(const std::string& operation_id) const {
  auto ttl = svc_.config->current()->http().status_cache_ms;
  if (ttl <= 0) return nullptr;
  std::lock_guard lock(mutex_);
  const auto* k = kept_.find(operation_id);
  if (!k || clock::now() - k->read_at >= std::chrono::milliseconds(ttl)) return nullptr;
  return k->row;
}

void status_reads::keep(const persistence::operation_row& row, std::uint64_t began, row_ptr shared) {
  if (immutable_step(row.step)) return;  // the ended-change cache has it, and answers before any kept row
  const auto ttl = svc_.config->current()->http().status_cache_ms;
  if (ttl <= 0) return;
  const auto now = clock::now();
  std::lock_guard lock(mutex_);
  if (workflow::is_terminal(row.phase)) {
    // A change that has ended is not polled (a client stops at its end): its row is not kept. A
    // kept row of it from before it ended is dropped, so a plain read never goes back to it.
    kept_.erase(row.operation_id);
    return;
  }
  if (began < kept_floor_) return;
  if (const auto* mark = written_at_.find(row.operation_id); mark && *mark > began) return;
  keep_row(shared ? std::move(shared) : std::make_shared<const persistence::operation_row>(row), now,
           std::chrono::milliseconds(ttl));
}

std::int64_t status_reads::next_tick_ms() const {
  auto recheck = svc_.config->current()->http().status_wait_recheck_ms;
  std::lock_guard lock(mutex_);
  if (waiters_.empty()) return std::min(recheck, deadline_tick_ms);
  auto now = clock::now();
  auto next = std::min(recheck - ms_until(now, last_recheck_), deadline_tick_ms);
  for (const auto& [id, w] : waiters_) {
    if (w->armed) next = std::min(next, ms_until(w->deadline, now));
  }
  return std::max<std::int64_t>(1, next);
}

void status_reads::remember(const persistence::operation_row& row, row_ptr shared) {
  if (!immutable_step(row.step)) return;
  if (!shared) shared = std::make_shared<const persistence::operation_row>(row);
  std::lock_guard lock(mutex_);
  ended_.put(row.operation_id, std::move(shared));
}

status_reads::row_ptr status_reads::cached_row(const std::string& operation_id) const {
  std::lock_guard lock(mutex_);
  const auto* row = ended_.find(operation_id);
  return row ? *row : nullptr;
}

status_view status_reads::view_of(persistence::session db, const persistence::operation_row& row, bool timeline) const {
  status_view v;
  v.row = row;
  if (timeline) {
    auto events = persistence::list_events(db, row.operation_id);
    if (!events.ok()) return failed_view(status_outcome::failed, events.error);
    v.timeline = std::move(events.value);
  }
  return v;
}

void status_reads::answer_from_memory(row_ptr held, const view_check& may_view, status_answer answer) {
  auto* registry = svc_.actors;
  // One row for the check and the answer, copied once, into the answer.
  may_view(*held, [held, registry, answer = std::move(answer)](bool visible) {
    if (!visible) return answer(failed_view(status_outcome::not_found));
    status_view v;
    v.live = registry->find(held->operation_id).has_value();
    v.row = *held;
    answer(std::move(v));
  });
}

void status_reads::read(status_query q, view_check may_view, status_answer answer) {
  // An ended change no one can move: answered from memory (its timeline still needs the query).
  // So is a plain read of a change in flight whose row this instance read a moment ago.
  if (!q.timeline) {
    if (auto row = cached_row(q.operation_id)) return answer_from_memory(std::move(row), may_view, std::move(answer));
    if (q.wait_ms <= 0 && !q.fresh) {
      if (auto row = kept(q.operation_id)) return answer_from_memory(std::move(row), may_view, std::move(answer));
    }
  }
  auto w = std::make_shared<waiter>();
  w->operation_id = q.operation_id;
  w->timeline = q.timeline;
  w->waits = q.wait_ms > 0;
  w->since = q.since;
  w->deadline = clock::now() + std::chrono::milliseconds(q.wait_ms);
  w->answer = std::move(answer);
  if (w->waits) {
    // Registered before the first read: a write that lands between that read and arming marks it
    // dirty instead of being missed.
    auto cap = static_cast<std::size_t>(svc_.config->current()->http().status_wait_max);
    std::unique_lock lock(mutex_);
    if (waiters_.size() >= cap) {
      lock.unlock();
      return w->answer(failed_view(status_outcome::overloaded));
    }
    waiters_.emplace(w->operation_id, w);
  }
  first_read(w, std::move(may_view));
}

void status_reads::first_read(const waiter_ptr& w, view_check may_view) {
  auto began = write_mark();
  if (!w->timeline) {
    auto snap = svc_.config->current();
    auto cap = static_cast<std::size_t>(std::max<std::int64_t>(1, snap->db().queue_capacity));
    // One read connection is left to everything else on the pool (timelines, the console, the waits'
    // re-check), and fewer jobs make larger batches: the rest wait for the next query together.
    auto jobs = static_cast<std::size_t>(std::max<std::int64_t>(1, snap->db().read_pool_size - 1));
    std::unique_lock lock(mutex_);
    if (pending_.size() >= cap) {
      lock.unlock();
      return finish(w, failed_view(status_outcome::overloaded));
    }
    pending_.push_back(pending_read{w, std::move(may_view), began});
    if (drains_ >= jobs) return;  // a busy batch job takes it with the others
    ++drains_;
    lock.unlock();
    return submit_drain();
  }
  bool queued = reads_.try_submit([this, w, began, may_view = std::move(may_view)](persistence::db_context& db) {
    auto row = persistence::load_operation(db, w->operation_id);
    if (row.outcome == persistence::db_outcome::not_found) return finish(w, failed_view(status_outcome::not_found));
    if (!row.ok()) return finish(w, failed_view(status_outcome::failed, row.error));
    remember(row.value);
    keep(row.value, began);
    after_first_read(w, may_view, view_of(db, row.value, w->timeline));
  });
  if (!queued) finish(w, failed_view(status_outcome::overloaded));
}

void status_reads::submit_drain() {
  auto ticket = std::make_shared<unrun_guard>();
  ticket->on_unrun = [this] { drain_lost(); };
  bool queued = reads_.try_submit([this, ticket](persistence::db_context& db) {
    ticket->ran = true;
    drain(db);
  });
  if (queued) return;
  ticket->ran = true;
  drain_lost();
}

void status_reads::drain_lost() {
  std::deque<pending_read> orphaned;
  {
    std::lock_guard lock(mutex_);
    if (drains_ > 0) --drains_;
    if (drains_ == 0) orphaned.swap(pending_);
  }
  for (auto& p : orphaned) finish(p.w, failed_view(status_outcome::overloaded));
}

void status_reads::drain(persistence::db_context& db) {
  std::vector<pending_read> batch;
  {
    std::lock_guard lock(mutex_);
    while (!pending_.empty() && batch.size() < status_batch_max) {
      batch.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
  }
  try {
    if (!batch.empty()) answer_batch(db, batch);
  } catch (const std::exception& e) {
    // Only allocation can fail here; every read of the batch is still answered (finish is once only).
    log::warn("status_read.batch_failed", {{"reads", std::to_string(batch.size())}, {"error", e.what()}});
    for (auto& p : batch) finish(p.w, failed_view(status_outcome::failed));
  }
  {
    std::lock_guard lock(mutex_);
    if (pending_.empty()) {
      --drains_;
      return;
    }
  }
  submit_drain();  // more came meanwhile: the next job, behind whatever else the pool has queued
}

void status_reads::answer_batch(persistence::db_context& db, std::vector<pending_read>& batch) {
  std::vector<std::string> ids;
  std::unordered_set<std::string> seen;
  for (const auto& p : batch) {
    if (seen.insert(p.w->operation_id).second) ids.push_back(p.w->operation_id);
  }
  auto rows = persistence::load_operation_views(db, ids);
  {
    std::lock_guard lock(mutex_);
    ++batch_stats_.queries;
    batch_stats_.reads += batch.size();
  }
  // Each row shared by the memory of kept rows and the answers, keyed by its own id.
  std::unordered_map<std::string_view, row_ptr> by_id;
  if (rows.ok()) {
    for (auto& row : rows.value) {
      auto shared = std::make_shared<const persistence::operation_row>(std::move(row));
      remember(*shared, shared);
      by_id.emplace(shared->operation_id, std::move(shared));
    }
  }
  for (auto& p : batch) {
    try {
      if (!rows.ok()) {
        finish(p.w, failed_view(status_outcome::failed, rows.error));
        continue;
      }
      auto it = by_id.find(p.w->operation_id);
      if (it == by_id.end()) {
        finish(p.w, failed_view(status_outcome::not_found));
        continue;
      }
      keep(*it->second, p.began, it->second);
      status_view first;
      first.row = *it->second;
      after_first_read(p.w, p.may_view, std::move(first));
    } catch (const std::exception& e) {
      // One read's failure (its visibility check, its answer) never leaves the others unanswered.
      log::warn("status_read.batch_item_failed", {{"operation_id", p.w->operation_id}, {"error", e.what()}});
      finish(p.w, failed_view(status_outcome::failed));
    }
  }
}

void status_reads::after_first_read(const waiter_ptr& w, const view_check& may_view, status_view first) {
  if (first.outcome != status_outcome::ok) return finish(w, std::move(first));
  // The check reads the row and the answer takes it: one allocation, not a copy of the row.
  auto held = std::make_shared<status_view>(std::move(first));
  may_view(held->row, [this, w, held](bool visible) {
    auto& view = *held;
    if (!visible) return finish(w, failed_view(status_outcome::not_found));
    bool moved = false;
    bool armed = false;
    bool again = false;
    {
      std::lock_guard lock(mutex_);
      if (!w->since) w->since = view.row.version;
      moved = w->moved(view.row);
      if (w->waits && !moved && clock::now() < w->deadline) {
        armed = w->armed = true;
        again = w->dirty;
        w->dirty = false;
      }
    }
    if (!armed) return finish(w, std::move(view));
    if (again) reread(w);
  });
}

status_batch_stats status_reads::batch_stats() const {
  std::lock_guard lock(mutex_);
  return batch_stats_;
}

void status_reads::row_written(const std::string& operation_id) {
  written(operation_id, nullptr);
}

void status_reads::row_written_as(const persistence::operation_row& row, std::int64_t found_version) {
  written(row.operation_id, &row, found_version);
}

void status_reads::written(const std::string& operation_id, const persistence::operation_row* committed,
                           std::int64_t found_version) {
  std::vector<waiter_ptr> to_read;
  std::vector<waiter_ptr> to_answer;
  {
    std::lock_guard lock(mutex_);
    ++writes_;
    if (const auto* k = kept_.find(operation_id)) {
      // The committed row replaces the kept one only when that is the version it moved from: a
      // kept row at any other version, or none (another write dropped it), means another write
      // came between, which may be newer than `committed`.
      const auto ttl = svc_.config->current()->http().status_cache_ms;
      if (committed && k->row->version == (found_version != 0 ? found_version : committed->version - 1) &&
          !immutable_step(committed->step) && ttl > 0) {
        keep_row(std::make_shared<const persistence::operation_row>(*committed), clock::now(),
                 std::chrono::milliseconds(ttl));
      } else {
        kept_.erase(operation_id);
      }
    }
    // Past the bound the oldest mark is forgotten: a read that began before it keeps nothing.
    written_at_.put(operation_id, writes_,
                    [this](const std::string&, std::uint64_t mark) { kept_floor_ = std::max(kept_floor_, mark); });
    auto [begin, end] = waiters_.equal_range(operation_id);
    for (auto it = begin; it != end; ++it) {
      auto& w = it->second;
      if (!w->armed || w->reading) {
        w->dirty = true;
      } else if (committed && !w->timeline && w->moved(*committed)) {
        // The write handed over the row it committed, and that row already answers the wait: no
        // read. (A later write cannot be missed: it finds this waiter gone, or answers it itself.)
        to_answer.push_back(w);
      } else {
        to_read.push_back(w);
      }
    }
  }
  for (const auto& w : to_answer) {
    status_view v;
    v.row = *committed;
    finish(w, std::move(v));
  }
  for (const auto& w : to_read) reread(w);
}

void status_reads::reread(const waiter_ptr& w) {
  {
    std::lock_guard lock(mutex_);
    if (w->done) return;
    if (w->reading) {
      w->dirty = true;
      return;
    }
    w->reading = true;
    w->dirty = false;
  }
  bool queued = reads_.try_submit([this, w](persistence::db_context& db) {
    auto row = persistence::load_operation(db, w->operation_id);
    bool answered = false;
    if (row.outcome == persistence::db_outcome::not_found) {
      finish(w, failed_view(status_outcome::not_found));
      answered = true;
    } else if (row.ok()) {
      remember(row.value);
      answered = settle(w, db, row.value, false);
    }
    // A failed read is left to the re-check job, which also ends the wait at its deadline.
    if (answered) return;
    bool again = false;
    {
      std::lock_guard lock(mutex_);
      w->reading = false;
      again = w->dirty && !w->done;
    }
    if (again) reread(w);
  });
  if (!queued) {
    std::lock_guard lock(mutex_);
    w->reading = false;
  }
}

bool status_reads::settle(const waiter_ptr& w, persistence::session db, const persistence::operation_row& row,
                          bool deadline_passed) {
  bool moved = false;
  {
    std::lock_guard lock(mutex_);
    if (w->done) return true;
    moved = w->moved(row);
  }
  if (!moved && !deadline_passed) return false;
  finish(w, view_of(db, row, w->timeline));
  return true;
}

void status_reads::finish(const waiter_ptr& w, status_view view) {
  {
    std::lock_guard lock(mutex_);
    if (w->done) return;
    w->done = true;
    auto [begin, end] = waiters_.equal_range(w->operation_id);
    for (auto it = begin; it != end; ++it) {
      if (it->second == w) {
        waiters_.erase(it);
        break;
      }
    }
  }
  if (view.outcome == status_outcome::ok) view.live = svc_.actors->find(w->operation_id).has_value();
  auto answer = std::move(w->answer);
  answer(std::move(view));
}

bool status_reads::recheck_pass(persistence::db_context& db) {
  auto now = clock::now();
  auto recheck = svc_.config->current()->http().status_wait_recheck_ms;
  std::vector<waiter_ptr> due;
  {
    std::lock_guard lock(mutex_);
    bool everyone = ms_until(now, last_recheck_) >= recheck;
    if (everyone) last_recheck_ = now;
    for (const auto& [id, w] : waiters_) {
      if (w->armed && (everyone || w->deadline <= now)) due.push_back(w);
    }
  }
  if (due.empty()) return false;
  std::vector<std::string> ids;
  std::unordered_set<std::string> seen;
  for (const auto& w : due) {
    if (seen.insert(w->operation_id).second) ids.push_back(w->operation_id);
  }
  auto rows = persistence::load_operation_views(db, ids);
  if (!rows.ok()) {
    for (const auto& w : due) {
      if (w->deadline <= now) finish(w, failed_view(status_outcome::failed, rows.error));
    }
    return false;
  }
  std::unordered_map<std::string, const persistence::operation_row*> by_id;
  for (const auto& row : rows.value) {
    remember(row);
    by_id.emplace(row.operation_id, &row);
  }
  for (const auto& w : due) {
    auto it = by_id.find(w->operation_id);
    if (it == by_id.end()) {
      finish(w, failed_view(status_outcome::not_found));
      continue;
    }
    settle(w, db, *it->second, w->deadline <= now);
  }
  return false;
}

}  // namespace changeflow::service
