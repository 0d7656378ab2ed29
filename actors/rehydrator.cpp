#include "actors/rehydrator.hpp"

#include "actors/request_actor.hpp"
#include "base/log.hpp"
#include "persistence/errors.hpp"
#include "persistence/instance_repo.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>

namespace changeflow::actors {

namespace {
constexpr std::int64_t tick_ms = 50;
// Actors started per tick for rows that make no external call at start (40,000/s).
constexpr std::size_t quiet_per_tick = 2000;
}  // namespace

struct rehydrator::shared_state {
  struct item {
    persistence::operation_row row;
    bool initial = false;  // part of the start-up backlog (counts for readiness)
  };
  mutable std::mutex mutex;
  // Rows due for work within a second (their actor calls out at once: paced) and rows waiting for
  // a callback or a long timer (no call at start: spawned without pace).
  std::deque<item> due;
  std::deque<item> quiet;
  std::atomic<bool> loading{true};
  std::atomic<std::size_t> initial_total{0};
  std::atomic<std::size_t> initial_done{0};
  std::atomic<bool> stopped{false};
  std::int64_t load_started_ms = 0;
  double pace_credit = 0;  // pacer only: fractional spawns carried to the next tick
  // Why the start-up load cannot go on right now (the database answers errors); "" while it can.
  // Readiness stays 503 with this reason until a load succeeds: an instance that cannot see its
  // rows must not take traffic as if it had resumed them.
  std::string load_error;  // guarded by mutex
  int load_failures = 0;   // guarded by mutex

  void push(std::vector<persistence::operation_row> rows, bool initial, std::int64_t now_ms) {
    std::lock_guard lock(mutex);
    for (auto& r : rows) {
      if (initial) ++initial_total;
      const bool is_quiet = r.next_wake_at_ms && *r.next_wake_at_ms > now_ms + 1000;
      (is_quiet ? quiet : due).push_back({std::move(r), initial});
    }
  }
  std::size_t size() const { return due.size() + quiet.size(); }
};

namespace {

/// Only rows a request actor drives are worth queuing: terminal, MERGED and batch rows are not.
std::vector<persistence::operation_row> resumable(std::vector<persistence::operation_row> rows) {
  std::vector<persistence::operation_row> out;
  out.reserve(rows.size());
  for (auto& r : rows) {
    if (workflow::needs_actor(r.step)) out.push_back(std::move(r));
  }
  return out;
}

/// One pacing pass, on the pacer job's actor: spawns what the credit of one tick allows.
void pace(runtime::services* svc, const std::shared_ptr<rehydrator::shared_state>& sh) {
  auto& carry = sh->pace_credit;
  if (sh->stopped) return;
  auto rate = svc->config->current()->rehydrate().rate_per_second;
  carry += static_cast<double>(rate) * tick_ms / 1000.0;
  std::vector<rehydrator::shared_state::item> batch;
  {
    // The pace protects the external systems from a restart's burst of calls. A row whose
    // next wake-up is far off makes no call when its actor starts, so it costs no credit:
    // only a cap per tick keeps the actor threads free.
    std::lock_guard lock(sh->mutex);
    for (std::size_t n = 0; n < quiet_per_tick && !sh->quiet.empty(); ++n) {
      batch.push_back(std::move(sh->quiet.front()));
      sh->quiet.pop_front();
    }
    while (carry >= 1.0 && !sh->due.empty()) {
      batch.push_back(std::move(sh->due.front()));
      sh->due.pop_front();
      carry -= 1.0;
    }
    if (sh->due.empty()) carry = std::min(carry, 1.0);  // no credit saved up while idle
  }
  for (auto& it : batch) {
    auto now = svc->now_ms();
    // Read when queued, maybe seconds ago: the row is read again before the actor acts.
    auto seed = seed_from_row(it.row, now);
    seed.read_first = true;
    if (spawn_request_actor(*svc, std::move(seed))) {
      svc->metrics->inc("changeflow_rehydrated_total", "Request actors resumed from their stored row");
    }
    if (it.initial && ++sh->initial_done == sh->initial_total && !sh->loading) {
      log::info("rehydrate.done",
                {{"operations", sh->initial_total.load()}, {"elapsed_ms", svc->now_ms() - sh->load_started_ms}});
    }
  }
}

/// The start-up load, on a database worker: pages of owned rows, then takeovers. Retries a
/// connectivity failure for a while (the database may be restarting); the sweeper and the lease
/// keeper pick up whatever a failed load left behind.
void load_backlog(persistence::db_context& db, runtime::services* svc, std::shared_ptr<rehydrator::shared_state> sh) {
  auto page_size = static_cast<int>(svc->config->current()->rehydrate().page_size);
  std::string after;
  std::size_t owned = 0, taken_count = 0;
  int failures = 0;
  // A connectivity failure is retried until it passes (backing off to 5 s) or the process stops:
  // giving up would report ready with rows nobody resumed. The reason is shown by /readyz.
  auto failed = [&](const std::string& what) {
    ++failures;
    {
      std::lock_guard lock(sh->mutex);
      sh->load_error = what;
      sh->load_failures = failures;
    }
    log::warn("rehydrate.load_failed", {{"error", what}, {"attempt", failures}});
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5000, 250 << std::min(failures, 5))));
    return !sh->stopped;
  };
  auto succeeded = [&] {
    if (failures == 0) return;
    failures = 0;
    std::lock_guard lock(sh->mutex);
    sh->load_error.clear();
    sh->load_failures = 0;
  };
  // 1. Rows this instance already owns (a restart with the same instance.id).
  while (!sh->stopped) {
    auto page = persistence::list_owned_nonterminal(db, svc->instance_id, after, page_size);
    if (!page.ok()) {
      if (failed(page.error.message)) continue;
      break;
    }
    succeeded();
    if (page.value.empty()) break;
    after = page.value.back().operation_id;
    bool last = static_cast<int>(page.value.size()) < page_size;
    auto rows = resumable(std::move(page.value));
    owned += rows.size();
    sh->push(std::move(rows), true, svc->now_ms());
    if (last) break;
  }
  // 2. Rows whose owner's lease expired (a crashed peer, or this host's previous instance id).
  while (!sh->stopped) {
    auto taken = persistence::take_over_expired(db, svc->instance_id, page_size);
    if (!taken.ok()) {
      if (failed(taken.error.message)) continue;
      break;
    }
    succeeded();
    if (taken.value.empty()) break;
    std::vector<std::string> ids;
    for (const auto& t : taken.value) ids.push_back(t.operation_id);
    auto rows = persistence::load_operations(db, ids);
    if (!rows.ok()) {
      // Taken but not loaded: the sweeper's stuck scan finds them (owned, no actor).
      if (failed(rows.error.message)) continue;
      break;
    }
    auto r = resumable(std::move(rows.value));
    taken_count += r.size();
    sh->push(std::move(r), true, svc->now_ms());
    if (static_cast<int>(taken.value.size()) < page_size) break;
  }
  sh->loading = false;
  log::info("rehydrate.loaded",
            {{"owned", owned}, {"taken_over", taken_count}, {"elapsed_ms", svc->now_ms() - sh->load_started_ms}});
  if (sh->initial_done >= sh->initial_total) {
    log::info("rehydrate.done",
              {{"operations", sh->initial_total.load()}, {"elapsed_ms", svc->now_ms() - sh->load_started_ms}});
  }
}

}  // namespace

rehydrator::rehydrator(runtime::services& svc) : svc_(svc), shared_(std::make_shared<shared_state>()) {}

rehydrator::~rehydrator() {
  stop();
}

void rehydrator::start() {
  shared_->load_started_ms = svc_.now_ms();
  auto* svc = &svc_;
  auto sh = shared_;
  periodic_spec spec;
  spec.name = "rehydrate_pacer";
  spec.interval_ms = [] { return tick_ms; };
  spec.start_pass = [svc, sh](pass_done done) {
    pace(svc, sh);
    done(false);
    return true;
  };
  pacer_.start(*svc_.system, std::move(spec));
  bool queued = svc_.db->try_submit([svc, sh](persistence::db_context& db) { load_backlog(db, svc, sh); });
  if (!queued) {
    // Cannot happen at start (the queue is empty); if it does, the sweeper resumes the rows later.
    log::error("rehydrate.not_queued");
    shared_->loading = false;
  }
}

void rehydrator::enqueue(std::vector<persistence::operation_row> rows) {
  shared_->push(resumable(std::move(rows)), false, svc_.now_ms());
}

bool rehydrator::initial_done() const {
  return !shared_->loading && shared_->initial_done >= shared_->initial_total;
}

std::optional<std::string> rehydrator::not_ready_reason() const {
  if (initial_done()) return std::nullopt;
  {
    std::lock_guard lock(shared_->mutex);
    if (!shared_->load_error.empty()) {
      return "rehydration cannot load its rows (attempt " + std::to_string(shared_->load_failures) +
             "): " + shared_->load_error;
    }
  }
  auto total = std::to_string(shared_->initial_total.load());
  return "rehydrating " + std::to_string(shared_->initial_done.load()) + "/" + total +
         (shared_->loading ? "+ (loading)" : "");
}

std::size_t rehydrator::queued() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->size();
}

void rehydrator::stop() {
  shared_->stopped = true;
  pacer_.stop();
}

}  // namespace changeflow::actors
