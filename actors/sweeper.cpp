#include "actors/sweeper.hpp"

#include "actors/registry.hpp"
#include "actors/request_actor.hpp"
#include "base/log.hpp"
#include "messages/messages.hpp"
#include "persistence/durability_repo.hpp"
#include "persistence/errors.hpp"

#include <caf/all.hpp>

namespace changeflow::actors {

struct sweeper::shared_state {
  std::string stuck_cursor;  // sweep job only (passes never overlap): keyset position of the stuck scan
};

namespace {

void nudge_live(runtime::services* svc, const std::string& id, const char* cause) {
  svc->actors->send_if_present(id, [cause](const caf::actor& a) { caf::anon_send(a, messages::row_changed{cause}); });
}

/// Owner's inbox: rows changed recently; compare with what the live actors know.
void poll_inbox(persistence::db_context& db, runtime::services* svc, rehydrator* rehydrate) {
  auto interval = svc->config->current()->durability().inbox_poll_ms;
  // The look-back overlaps several polls so a slow poll never skips a change; duplicates are
  // harmless (the version comparison below filters them).
  auto changed = persistence::list_owned_changed_since(db, svc->instance_id, interval * 4 + 2000, 2000);
  if (!changed.ok()) return;
  svc->metrics->inc("changeflow_inbox_passes_total", "Passes of the owner's changed-row poll that read the rows");
  const auto now = svc->now_ms();
  const auto beyond = svc->config->current()->durability().passivate_beyond_seconds;
  std::vector<std::string> to_spawn;
  for (const auto& c : changed.value) {
    if (!workflow::needs_actor(c.step)) continue;
    if (auto summary = svc->actors->summary(c.operation_id)) {
      if (summary->version < c.version) {
        nudge_live(svc, c.operation_id, "row changed elsewhere");
        svc->metrics->inc("changeflow_inbox_nudges_total", "Actors told to reload a row changed elsewhere");
      }
      continue;
    }
    // A passivated wait has no actor by design; the spawn below would refuse it after reading its
    // whole row, on every pass while the row is within the look-back. Its step and deadline are in
    // the list already, so it is left alone here (a row that moved on is no longer such a wait).
    if (passivated_wait(c.step, c.next_wake_at_ms, now, beyond)) continue;
    to_spawn.push_back(c.operation_id);
  }
  // During the start-up backlog the rehydrator resumes these in its own (paced) order.
  if (to_spawn.empty() || !rehydrate->initial_done()) return;
  auto rows = persistence::load_operations(db, to_spawn);
  if (!rows.ok()) return;
  for (const auto& row : rows.value) {
    if (!workflow::needs_actor(row.step) || row.owner_instance.value_or("") != svc->instance_id) continue;
    if (spawn_request_actor(*svc, seed_from_row(row, svc->now_ms()))) {
      svc->metrics->inc("changeflow_inbox_spawns_total", "Actors spawned for rows changed elsewhere");
    }
  }
}

void time_out(persistence::db_context& db, runtime::services* svc, const persistence::overdue_operation& o,
              workflow::step to, const std::string& cause) {
  persistence::transition_request req;
  req.operation_id = o.operation_id;
  req.expected_version = o.version;
  req.from = o.step;
  req.to = to;
  req.cause = cause;
  req.actor = "sweeper";
  req.instance_id = svc->instance_id;
  req.clear_wake = true;
  auto r = persistence::transition(db, req);
  if (r.ok()) {
    svc->metrics->inc("changeflow_sweep_timeouts_total", "Operations moved by the timeout sweep",
                      {{"step", std::string(workflow::to_string(to))}});
    log::info("sweep.timed_out", {{"operation_id", o.operation_id}, {"to", workflow::to_string(to)}});
    nudge_live(svc, o.operation_id, "timed out by the sweep");
    if (svc->row_written) svc->row_written(o.operation_id);
  }
  // preempted: an actor or a peer's sweep moved it first; nothing to do.
}

void sweep(persistence::db_context& db, runtime::services* svc, rehydrator* rehydrate, std::string& cursor) {
  const auto snap = svc->config->current();
  auto grace = static_cast<int>(snap->durability().approval_grace_seconds);
  auto deploy_wait = static_cast<int>(snap->timeouts().deploy_wait_seconds);
  auto stuck_after = static_cast<int>(snap->durability().stuck_after_seconds);
  if (auto overdue = persistence::list_approval_overdue(db, grace, 200); overdue.ok()) {
    for (const auto& o : overdue.value) {
      time_out(db, svc, o, workflow::step::APPROVAL_TIMEOUT, "no approval decision before the deadline (sweep)");
    }
  }
  if (auto overdue = persistence::list_deploy_overdue(db, deploy_wait, 200); overdue.ok()) {
    for (const auto& o : overdue.value) {
      time_out(db, svc, o, workflow::step::DEPLOY_TIMEOUT,
               "no deploy confirmation within timeouts.deploy_wait_seconds (sweep)");
    }
  }
  if (!rehydrate->initial_done()) return;
  constexpr int page = 500;
  auto stale = persistence::list_owned_unchanged(db, svc->instance_id, stuck_after, cursor, page);
  if (!stale.ok()) return;
  cursor = static_cast<int>(stale.value.size()) < page ? std::string() : stale.value.back().operation_id;
  std::vector<persistence::operation_row> orphans;
  const auto now = svc->now_ms();
  const auto beyond = snap->durability().passivate_beyond_seconds;
  for (auto& row : stale.value) {
    // A passivated wait has no actor by design until its deadline comes near (or the row moves).
    if (passivated_wait(row.step, row.next_wake_at_ms.value_or(0), now, beyond)) continue;
    if (workflow::needs_actor(row.step) && !svc->actors->find(row.operation_id)) orphans.push_back(std::move(row));
  }
  if (orphans.empty()) return;
  svc->metrics->inc("changeflow_sweep_respawns_total", "Owned operations found without a live actor", {},
                    static_cast<double>(orphans.size()));
  log::info("sweep.respawn", {{"operations", orphans.size()}});
  rehydrate->enqueue(std::move(orphans));
}

}  // namespace

sweeper::sweeper(runtime::services& svc, rehydrator& rehydrate)
    : svc_(svc), rehydrate_(rehydrate), shared_(std::make_shared<shared_state>()) {}

sweeper::~sweeper() {
  stop();
}

void sweeper::start() {
  auto* svc = &svc_;
  auto* rh = &rehydrate_;
  auto sh = shared_;
  periodic_spec inbox;
  inbox.name = "inbox";
  inbox.interval_ms = [svc] { return svc->config->current()->durability().inbox_poll_ms; };
  inbox.start_pass = db_pass(*svc_.db, inbox_.stop_flag(), inbox.name, [svc, rh](persistence::db_context& db) {
    poll_inbox(db, svc, rh);
    return false;
  });
  inbox_.start(*svc_.system, std::move(inbox));
  periodic_spec sweep_spec;
  sweep_spec.name = "sweep";
  sweep_spec.interval_ms = [svc] { return svc->config->current()->durability().sweep_interval_ms; };
  sweep_spec.start_pass =
      db_pass(*svc_.db, sweep_.stop_flag(), sweep_spec.name, [svc, rh, sh](persistence::db_context& db) {
        sweep(db, svc, rh, sh->stuck_cursor);
        return false;
      });
  sweep_.start(*svc_.system, std::move(sweep_spec));
}

void sweeper::stop() {
  inbox_.stop();
  sweep_.stop();
}

}  // namespace changeflow::actors
