#include "actors/lease_keeper.hpp"

#include "base/log.hpp"
#include "persistence/errors.hpp"
#include "persistence/instance_repo.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>

namespace changeflow::actors {

namespace {

int lease_seconds_of(const runtime::services& svc) {
  return static_cast<int>(svc.config->current()->instance().lease_seconds);
}

enum class verdict { yes, no, stopped };

/// Runs `job` on the database pool and waits for its verdict; `no` on timeout or a full queue,
/// `stopped` when `stop_asked` (asked between waits of at most 50 ms) says so first.
verdict run_blocking(runtime::services& svc, std::chrono::milliseconds timeout,
                     std::function<bool(persistence::db_context&)> job, const std::function<bool()>& stop_asked = {}) {
  auto done = std::make_shared<std::promise<bool>>();
  auto result = done->get_future();
  bool queued =
      svc.db->try_submit([done, job = std::move(job)](persistence::db_context& db) { done->set_value(job(db)); });
  if (!queued) return verdict::no;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto slice = stop_asked ? std::chrono::milliseconds(50) : timeout;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return verdict::no;
    if (result.wait_for(std::min<std::chrono::steady_clock::duration>(slice, deadline - now)) ==
        std::future_status::ready) {
      return result.get() ? verdict::yes : verdict::no;
    }
    if (stop_asked && stop_asked()) return verdict::stopped;
  }
}
}  // namespace

namespace {

void tick(persistence::db_context& db, runtime::services* svc, rehydrator* rehydrate) {
  auto lease = lease_seconds_of(*svc);
  auto beat = persistence::heartbeat(db, svc->instance_id, lease);
  if (beat.outcome == persistence::db_outcome::not_found) {
    // Marked stopped or deleted behind our back: register again. Operations taken over meanwhile
    // stay with their new owner (our actors find that out through their fence and stop).
    log::warn("lease.re_register", {{"instance_id", svc->instance_id}});
    persistence::register_instance(db, svc->instance_id, lease);
  } else if (!beat.ok()) {
    log::warn("lease.heartbeat_failed", {{"error", beat.error.message}});
    return;
  }
  auto page = static_cast<int>(svc->config->current()->rehydrate().page_size);
  auto taken = persistence::take_over_expired(db, svc->instance_id, page);
  if (!taken.ok()) {
    log::warn("lease.takeover_failed", {{"error", taken.error.message}});
    return;
  }
  if (taken.value.empty()) return;
  std::vector<std::string> ids;
  for (const auto& t : taken.value) ids.push_back(t.operation_id);
  svc->metrics->inc("changeflow_takeovers_total", "Operations taken over from an instance whose lease expired", {},
                    static_cast<double>(ids.size()));
  log::info("lease.took_over", {{"operations", ids.size()}});
  auto rows = persistence::load_operations(db, ids);
  // A failed load leaves the rows owned by us without an actor: the sweeper's stuck scan resumes them.
  if (rows.ok()) rehydrate->enqueue(std::move(rows.value));
}

}  // namespace

lease_keeper::lease_keeper(runtime::services& svc, rehydrator& rehydrate) : svc_(svc), rehydrate_(rehydrate) {}

lease_keeper::~lease_keeper() {
  stop();
}

lease_keeper::registration lease_keeper::register_now(std::chrono::milliseconds timeout,
                                                      const std::function<bool()>& stop_asked) {
  auto* svc = &svc_;
  const auto v = run_blocking(
      svc_, timeout,
      [svc](persistence::db_context& db) {
        auto r = persistence::register_instance(db, svc->instance_id, lease_seconds_of(*svc));
        if (!r.ok()) {
          log::error("lease.register_failed", {{"error", r.error.message}});
          return false;
        }
        log::info("lease.registered", {{"instance_id", svc->instance_id}, {"epoch", r.value}});
        return true;
      },
      stop_asked);
  switch (v) {
    case verdict::yes: return registration::registered;
    case verdict::no: return registration::failed;
    case verdict::stopped: return registration::stop_requested;
  }
  return registration::failed;
}

void lease_keeper::start() {
  auto* svc = &svc_;
  auto* rehydrate = &rehydrate_;
  periodic_spec spec;
  spec.name = "lease";
  spec.interval_ms = [svc] { return std::max<std::int64_t>(200, lease_seconds_of(*svc) * 1000 / 3); };
  spec.start_pass = db_pass(*svc_.db, ticker_.stop_flag(), spec.name, [svc, rehydrate](persistence::db_context& db) {
    tick(db, svc, rehydrate);
    return false;
  });
  ticker_.start(*svc_.system, std::move(spec));
}

void lease_keeper::stop() {
  ticker_.stop();
}

bool lease_keeper::release_now(std::chrono::milliseconds timeout) {
  auto* svc = &svc_;
  return run_blocking(svc_, timeout, [svc](persistence::db_context& db) {
           auto r = persistence::mark_instance_stopped(db, svc->instance_id);
           if (!r.ok()) {
             log::warn("lease.release_failed", {{"error", r.error.message}});
             return false;
           }
           log::info("lease.released", {{"instance_id", svc->instance_id}});
           return true;
         }) == verdict::yes;
}

}  // namespace changeflow::actors
