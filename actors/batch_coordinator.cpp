#include "actors/batch_coordinator.hpp"

#include "actors/file_actions.hpp"

#include "base/answer_guard.hpp"
#include "base/log.hpp"
#include "persistence/operation_repo.hpp"
#include "workflow/batch_decide.hpp"
#include "workflow/poll_schedule.hpp"

#include <caf/all.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <chrono>

namespace changeflow::actors {

std::string_view to_string(round_outcome o) {
  switch (o) {
    case round_outcome::claimed: return "claimed";
    case round_outcome::empty: return "empty";
    case round_outcome::slot_occupied: return "slot_occupied";
    case round_outcome::preempted: return "preempted";
    case round_outcome::sweep: return "sweep";
    case round_outcome::resume: return "resume";
    case round_outcome::operator_settle: return "operator_settle";
    case round_outcome::error: return "error";
  }
  return "error";
}

namespace {

using persistence::batch_status;
using persistence::session;
using kind = batch_job_result::kind;
namespace core = workflow::batch;
using act = core::action::kind;

/// The batch this coordinator drives: the core's state plus what only the shell needs.
struct drive {
  std::uint64_t id = 0;  // tells this drive's job results from a previous drive's
  batch_status expected = batch_status::RUNNING;
  std::vector<batch_member_change> members;  // with their files (the MR carries them)
  std::string mr_url;
  std::int64_t started_ms = 0;
  core::drive state;
};

struct coordinator_state {
  static inline const char* name = "batch_coordinator";
  services* svc = nullptr;
  batch_coordinator_options options;
  bool round_in_flight = false;
  std::optional<drive> d;
  std::uint64_t next_drive_id = 0;
  std::uint64_t round_timer = 0;
  std::uint64_t poll_timer = 0;
};

using self_ptr = batch_coordinator::stateful_pointer<coordinator_state>;

std::int64_t now_ms(self_ptr self) {
  return self->state.svc->now_ms();
}

void count_round(self_ptr self, round_outcome outcome) {
  self->state.svc->metrics->inc("changeflow_batch_rounds_total", "Batch rounds by outcome",
                                {{"outcome", std::string(to_string(outcome))}});
}

/// A guarded write's result as the coordinator reads it: applied, preempted by another settler, or failed.
template <class T>
void take_write(batch_job_result& out, const persistence::db_result<T>& w) {
  out.ok = w.ok();
  out.preempted = w.outcome == persistence::db_outcome::preempted;
  if (!w.ok()) out.error = w.error.message;
}

/// The answer to a job that ended without one (it threw, or was dropped unrun): a failed result of
/// the same kind, which the coordinator retries like any database or GitLab failure.
batch_job_result lost_result(kind what, std::uint64_t drive_id) {
  log::warn("batch.job_lost", {{"job", static_cast<int>(what)}, {"drive", drive_id}});
  batch_job_result out;
  out.what = what;
  out.drive = drive_id;
  out.ok = false;
  out.round = round_outcome::error;
  out.mr.outcome = batch_mr_view::call::retryable;
  out.error = out.mr.error = "the job ended without an answer (it threw or was dropped); see worker_pool.job_failed";
  return out;
}

/// Runs `job` on the database pool and sends its result back; a full queue or a dead connection
/// becomes an error result, never an exception on the actor.
void on_db(self_ptr self, kind what, std::function<void(session, batch_job_result&)> job) {
  auto handle = caf::actor_cast<batch_coordinator>(self);
  const std::uint64_t drive_id = self->state.d ? self->state.d->id : 0;
  auto guard = make_answer_guard([handle, what, drive_id] { caf::anon_send(handle, lost_result(what, drive_id)); });
  bool queued = self->state.svc->db->try_submit([handle, what, drive_id, job, guard](persistence::db_context& db) {
    batch_job_result out;
    out.what = what;
    out.drive = drive_id;
    try {
      job(db, out);
    } catch (const std::exception& e) {
      out.ok = false;
      out.round = round_outcome::error;
      out.error = e.what();
    }
    guard->answered();
    caf::anon_send(handle, std::move(out));
  });
  if (!queued) {
    guard->answered();
    batch_job_result out;
    out.what = what;
    out.drive = drive_id;
    out.ok = false;
    out.round = round_outcome::error;
    out.error = "database queue full";
    self->send(self, std::move(out));
  }
}

void on_external(self_ptr self, kind what,
                 std::function<void(clients::external_context&, const config::snapshot&, batch_job_result&)> job) {
  auto handle = caf::actor_cast<batch_coordinator>(self);
  const std::uint64_t drive_id = self->state.d ? self->state.d->id : 0;
  auto snap = self->state.svc->config->current();
  auto guard = make_answer_guard([handle, what, drive_id] { caf::anon_send(handle, lost_result(what, drive_id)); });
  bool queued =
      self->state.svc->external->try_submit([handle, what, drive_id, job, snap, guard](clients::external_context& ext) {
        batch_job_result out;
        out.what = what;
        out.drive = drive_id;
        try {
          ext.refresh(*snap);
          job(ext, *snap, out);
        } catch (const std::exception& e) {
          out.ok = false;
          out.mr.outcome = batch_mr_view::call::retryable;
          out.mr.error = std::string("unexpected: ") + e.what();
        }
        guard->answered();
        caf::anon_send(handle, std::move(out));
      });
  if (!queued) {
    guard->answered();
    batch_job_result out;
    out.what = what;
    out.drive = drive_id;
    out.ok = false;
    out.mr.outcome = batch_mr_view::call::retryable;
    out.mr.error = "external worker pool full";
    self->send(self, std::move(out));
  }
}

/// A repository call inside a job: false (with the error recorded) when it failed.
template <class T>
bool took(const persistence::db_result<T>& r, batch_job_result& out) {
  if (r.ok()) return true;
  out.round = round_outcome::error;
  out.ok = false;
  out.error = std::string(persistence::to_string(r.outcome)) + ": " + r.error.message;
  return false;
}

/// The members' rows, in the order of `ids` (claim order = admission order); `claimed_by` set: only
/// operations BATCH_CLAIMED by that batch. False (the error recorded in `out`) when the rows cannot
/// be read: a database failure ends the job, it never passes for a batch without members.
bool load_members(session conn, const std::vector<std::string>& ids, batch_job_result& out,
                  std::vector<batch_member_change>& into, std::optional<std::int64_t> claimed_by = std::nullopt) {
  auto loaded = persistence::load_operations(conn, ids);
  if (!took(loaded, out)) return false;
  const auto& rows = loaded.value;
  into.clear();
  for (const auto& id : ids) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.operation_id == id; });
    if (it == rows.end()) continue;
    if (claimed_by && (it->step != workflow::step::BATCH_CLAIMED || it->batch_id != claimed_by)) continue;
    into.push_back(
        {it->operation_id, it->subject_id, it->title, it->payload_json, it->created_at_ms, it->batch_attempts});
  }
  return true;
}

/// The core's numbers from the configuration snapshot (read per decision: hot reload applies).
core::settings settings_of(self_ptr self) {
  auto snap = self->state.svc->config->current();
  core::settings s;
  s.max_splits = static_cast<int>(snap->integer("batch.max_splits"));
  const auto attempts = snap->integer("batch.max_attempts");
  s.max_attempts = attempts > 0 ? static_cast<int>(attempts) : 3;
  s.polls.short_interval_ms = snap->integer("poll.short_interval_ms");
  s.polls.short_attempts = static_cast<int>(snap->integer("poll.short_attempts"));
  s.polls.long_interval_ms = snap->integer("poll.long_interval_ms");
  s.polls.timeout_ms = snap->integer("poll.timeout_ms");
  return s;
}

void arm_round_timer(self_ptr self, std::int64_t delay_ms) {
  auto gen = ++self->state.round_timer;
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(delay_ms, 0)), batch_tick{gen, false});
}

void arm_poll(self_ptr self, std::int64_t delay_ms) {
  auto gen = ++self->state.poll_timer;
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(delay_ms, 0)), batch_tick{gen, true});
}

/// The driven batch is settled (or abandoned to another settler): free the actor and run the next
/// round right away (bisection halves and deferred members are waiting).
void end_drive(self_ptr self, const std::string& outcome) {
  auto& st = self->state;
  if (st.d) {
    double seconds = static_cast<double>(now_ms(self) - st.d->started_ms) / 1000.0;
    st.svc->metrics->observe("changeflow_batch_duration_seconds", "Batch duration from claim to settlement",
                             {{"outcome", outcome}}, seconds);
    log::info("batch.settled", {{"batch_id", st.d->state.batch_id}, {"outcome", outcome}});
  }
  st.d.reset();
  arm_round_timer(self, 0);
}

// -- running what the core decided

void settle_failed(self_ptr self, const core::action& a) {
  auto& d = *self->state.d;
  const auto batch_id = d.state.batch_id;
  const auto expected = d.expected;
  if (a.plan == core::failure_plan::bisect) {
    self->state.svc->metrics->inc("changeflow_batch_splits_total", "Failing batches split in two halves");
  }
  on_db(self, kind::settled, [batch_id, expected, a](session conn, batch_job_result& out) {
    persistence::db_result<int> w;
    switch (a.plan) {
      case core::failure_plan::bisect:
        w = persistence::requeue_members(conn, batch_id, a.groups, a.text);
        out.settled_as = "split";
        break;
      case core::failure_plan::fail_alone:
        w = persistence::requeue_members(conn, batch_id, {}, a.text);
        out.settled_as = "failed_alone";
        break;
      case core::failure_plan::fail_all:
        w = persistence::settle_failed_batch(conn, batch_id, expected, persistence::member_reset::remove, a.text);
        out.settled_as = "failed";
        break;
      case core::failure_plan::requeue_bounded:
        w = persistence::settle_failed_batch(conn, batch_id, expected, persistence::member_reset::requeue, a.text,
                                             a.bounded.leave, a.leaving_cause);
        out.settled_as = a.bounded.leave.empty() ? "requeued" : "attempts_exhausted";
        break;
    }
    take_write(out, w);
  });
}

void run(self_ptr self, const core::action& a) {
  auto& d = *self->state.d;
  const auto batch_id = d.state.batch_id;
  const auto iid = d.state.mr_iid;
  switch (a.what) {
    case act::open_mr: {
      batch_plan plan = plan_batch(d.members);  // members are conflict-free here; this rebuilds the actions
      on_external(self, kind::mr_opened,
                  [batch_id, plan](clients::external_context& ext, const config::snapshot& snap,
                                   batch_job_result& out) { out.mr = open_batch_mr(ext, snap, batch_id, plan); });
      return;
    }
    case act::record_mr: {
      const auto branch = batch_branch(batch_id);
      const auto url = d.mr_url;
      on_db(self, kind::mr_recorded, [batch_id, iid, branch, url](session conn, batch_job_result& out) {
        take_write(out, persistence::record_batch_mr(conn, batch_id, iid, branch, url));
      });
      return;
    }
    case act::read_mr:
      on_external(self, kind::mr_read,
                  [iid](clients::external_context& ext, const config::snapshot&, batch_job_result& out) {
                    out.mr = read_batch_mr(ext, iid);
                  });
      return;
    case act::rebase_mr: {
      auto paths = paths_of(plan_batch(d.members).actions);
      on_external(self, kind::rebased,
                  [iid, paths](clients::external_context& ext, const config::snapshot&, batch_job_result& out) {
                    out.mr = rebase_batch_mr(ext, iid, paths);
                  });
      return;
    }
    case act::approve_and_merge: {
      auto paths = paths_of(plan_batch(d.members).actions);
      on_external(self, kind::merged,
                  [iid, paths](clients::external_context& ext, const config::snapshot& snap, batch_job_result& out) {
                    auto m = approve_and_merge(ext, snap, iid, paths);
                    out.merge = m.answer;
                    out.mr = m.mr;
                  });
      return;
    }
    case act::close_and_reread:
      on_external(self, kind::reread,
                  [iid](clients::external_context& ext, const config::snapshot&, batch_job_result& out) {
                    out.mr = close_and_reread(ext, iid);
                  });
      return;
    case act::find_and_close:
      on_external(self, kind::reread,
                  [batch_id](clients::external_context& ext, const config::snapshot&, batch_job_result& out) {
                    out.mr = find_batch_mr(ext, batch_id);
                    if (out.mr.outcome == batch_mr_view::call::ok && out.mr.iid)
                      out.mr = close_and_reread(ext, out.mr.iid);
                  });
      return;
    case act::settle_merged: {
      const auto expected = d.expected;
      const auto instance = self->state.svc->instance_id;
      const auto cause = a.text;
      on_db(self, kind::settled, [batch_id, expected, iid, cause, instance](session conn, batch_job_result& out) {
        take_write(out, persistence::settle_succeeded(conn, batch_id, expected, iid, cause, instance));
        out.settled_as = "succeeded";
      });
      return;
    }
    case act::settle_failed: settle_failed(self, a); return;
    case act::block: {
      const auto expected = d.expected;
      const auto why = a.text;
      on_db(self, kind::settled, [batch_id, expected, why](session conn, batch_job_result& out) {
        take_write(out, persistence::finish_batch(conn, batch_id, expected, batch_status::BLOCKED, why));
        out.settled_as = "blocked";
      });
      return;
    }
    case act::poll_later: arm_poll(self, a.delay_ms); return;
    case act::end: end_drive(self, a.text); return;
  }
}

/// Takes the core's decision: the drive becomes what it says, then its action runs.
void apply(self_ptr self, core::decision decision) {
  auto& d = *self->state.d;
  d.state = std::move(decision.next);
  if (decision.act.what == act::settle_failed || decision.act.what == act::block) {
    log::warn("batch.failed", {{"batch_id", d.state.batch_id}, {"reason", d.state.failure}});
  }
  run(self, decision.act);
}

void begin_drive(self_ptr self, const batch_job_result& r) {
  auto& st = self->state;
  drive d;
  d.id = ++st.next_drive_id;
  d.expected = r.status;
  d.members = r.members;
  d.started_ms = now_ms(self);
  d.state.batch_id = r.batch_id;
  d.state.depth = r.depth;
  d.state.mr_iid = r.mr_iid.value_or(0);
  for (const auto& m : r.members) d.state.members.push_back({m.operation_id, m.batch_attempts});
  st.d = std::move(d);
}

// -- the round

void start_round(self_ptr self) {
  auto& st = self->state;
  if (st.round_in_flight || st.d) return;
  st.round_in_flight = true;
  auto snap = st.svc->config->current();
  const int max_members = static_cast<int>(std::max<std::int64_t>(1, snap->integer("batch.max_members")));
  const int timeout_s = static_cast<int>(snap->integer("batch.running_timeout_seconds"));
  const std::string instance = st.svc->instance_id;
  on_db(self, kind::round_prepared, [max_members, timeout_s, instance](session conn, batch_job_result& out) {
    // 1. Timeout sweep (DB clock): a RUNNING batch older than the limit is settled like a failure.
    auto stale = persistence::sweep_running_older_than(conn, timeout_s);
    if (!took(stale, out)) return;
    if (!stale.value.empty()) {
      auto b = persistence::load_batch(conn, stale.value.front());
      if (!took(b, out)) return;
      out.round = round_outcome::sweep;
      out.batch_id = b.value.id;
      out.depth = b.value.split_depth;
      out.mr_iid = b.value.mr_iid;
      load_members(conn, b.value.members, out, out.members);
      return;
    }
    // 2. Lock-free pre-check: no "take the slot, then roll back" churn when nothing waits.
    auto waiting = persistence::has_waiting(conn);
    if (!took(waiting, out)) return;
    if (!waiting.value) {
      out.round = round_outcome::empty;
      return;
    }
    // 3. The claim transaction.
    auto c = persistence::claim(conn, max_members);
    if (!took(c, out)) return;
    switch (c.value.kind) {
      case persistence::claim_kind::claimed: out.round = round_outcome::claimed; break;
      case persistence::claim_kind::slot_occupied: out.round = round_outcome::slot_occupied; return;
      default: out.round = round_outcome::preempted; return;
    }
    out.batch_id = c.value.batch_id;
    auto depth = persistence::record_lineage(conn, c.value.batch_id);
    if (!took(depth, out)) return;
    out.depth = depth.value;
    std::vector<std::string> ids;
    for (const auto& m : c.value.members) ids.push_back(m.operation_id);
    std::vector<batch_member_change> claimed;
    if (!load_members(conn, ids, out, claimed)) return;
    auto plan = plan_batch(std::move(claimed));
    // Members that touch a file an older member touches wait for the next round.
    if (!took(persistence::defer_members(conn, c.value.batch_id, plan.deferred), out)) return;
    out.deferred = plan.deferred.size();
    if (!took(persistence::mark_members_claimed(conn, c.value.batch_id, instance), out)) return;
    // Re-read after the claim: the attempt counts include this batch, and a member closed since
    // the claim read (not moved to BATCH_CLAIMED) is not carried by the MR.
    std::vector<std::string> included;
    for (const auto& m : plan.included) included.push_back(m.operation_id);
    load_members(conn, included, out, out.members, c.value.batch_id);
  });
}

void on_round_prepared(self_ptr self, const batch_job_result& r) {
  auto& st = self->state;
  st.round_in_flight = false;
  switch (r.round) {
    case round_outcome::error:
      log::warn("batch.round_failed", {{"error", r.error}});
      count_round(self, r.round);
      return;
    case round_outcome::sweep:
      count_round(self, r.round);
      log::warn("batch.sweep", {{"batch_id", r.batch_id}});
      begin_drive(self, r);
      apply(self, core::start_failure(st.d->state, core::failure_cause::swept, {}));
      return;
    case round_outcome::operator_settle:
      begin_drive(self, r);
      apply(self, core::start_failure(st.d->state, core::failure_cause::operator_settled, {}));
      return;
    case round_outcome::resume:
      log::info("batch.resume", {{"batch_id", r.batch_id}, {"mr_iid", r.mr_iid.value_or(0)}});
      if (r.status == batch_status::BLOCKED) return;  // BLOCKED keeps the slot until an operator acts
      begin_drive(self, r);
      apply(self, core::begin(st.d->state, now_ms(self)));
      return;
    case round_outcome::claimed:
      count_round(self, r.round);
      st.svc->metrics->observe("changeflow_batch_size", "Members per claimed batch", {},
                               static_cast<double>(r.members.size()));
      log::info(
          "batch.claimed",
          {{"batch_id", r.batch_id}, {"members", r.members.size()}, {"deferred", r.deferred}, {"depth", r.depth}});
      begin_drive(self, r);
      apply(self, core::begin(st.d->state, now_ms(self)));
      return;
    case round_outcome::empty:
    case round_outcome::slot_occupied:
    case round_outcome::preempted: count_round(self, r.round); return;
  }
}

/// A job's result for the driven batch, handed to the core.
void on_result(self_ptr self, batch_job_result& r) {
  auto& d = *self->state.d;
  const auto s = settings_of(self);
  const auto now = now_ms(self);
  switch (r.what) {
    case kind::mr_opened:
      if (r.mr.outcome == batch_mr_view::call::ok) d.mr_url = r.mr.web_url;
      apply(self, core::on_mr_opened(d.state, r.mr, s, now));
      return;
    case kind::mr_recorded:
      if (!r.ok) log::warn("batch.record_mr_refused", {{"batch_id", d.state.batch_id}, {"error", r.error}});
      apply(self, core::on_mr_recorded(d.state, r.ok, r.preempted));
      return;
    case kind::mr_read: apply(self, core::on_mr_read(d.state, r.mr, s, now)); return;
    case kind::rebased: apply(self, core::on_rebase_requested(d.state, r.mr, s, now)); return;
    case kind::merged: apply(self, core::on_merge(d.state, r.merge, r.mr, s, now)); return;
    case kind::reread: apply(self, core::on_reread(d.state, r.mr, s)); return;
    case kind::settled:
      if (!r.ok) log::warn("batch.settle_not_applied", {{"batch_id", d.state.batch_id}, {"error", r.error}});
      apply(self, core::on_settled(d.state, r.ok, r.preempted, r.settled_as, s));
      return;
    case kind::round_prepared: return;
  }
}

/// Loads a batch to drive it (resume at start, adopt after unblock, operator settle).
void adopt(self_ptr self, std::optional<std::int64_t> batch_id, round_outcome outcome) {
  auto& st = self->state;
  st.round_in_flight = true;
  const int timeout_s = static_cast<int>(st.svc->config->current()->integer("batch.running_timeout_seconds"));
  on_db(self, kind::round_prepared, [batch_id, outcome, timeout_s](session conn, batch_job_result& out) {
    std::optional<persistence::batch_row> b;
    if (batch_id) {
      auto r = persistence::load_batch(conn, *batch_id);
      if (r.ok()) b = std::move(r.value);
    } else {
      auto r = persistence::find_active_batch(conn);
      if (!took(r, out)) return;
      b = std::move(r.value);
    }
    if (!b || (b->status != batch_status::RUNNING && b->status != batch_status::BLOCKED)) {
      out.round = round_outcome::empty;
      return;
    }
    out.round = outcome;
    if (outcome == round_outcome::resume && b->status == batch_status::RUNNING) {
      // Found at start but already past the running timeout: the sweep settles it instead.
      auto stale = persistence::sweep_running_older_than(conn, timeout_s);
      if (!took(stale, out)) return;
      if (std::find(stale.value.begin(), stale.value.end(), b->id) != stale.value.end())
        out.round = round_outcome::sweep;
    }
    out.batch_id = b->id;
    out.depth = b->split_depth;
    out.status = b->status;
    out.mr_iid = b->mr_iid;
    load_members(conn, b->members, out, out.members);
  });
}

}  // namespace

batch_coordinator spawn_batch_coordinator(services& svc, batch_coordinator_options options) {
  // `svc` travels as a spawn argument, not a capture: CAF 0.17 binds an actor function spawned
  // without arguments to a null std::tuple<> pointer (UBSan: reference binding to null pointer).
  return svc.system->spawn(
      [options](self_ptr self, services* svc_ptr) -> batch_coordinator::behavior_type {
        auto& svc = *svc_ptr;
        self->state.svc = &svc;
        self->state.options = options;
        if (options.resume_on_start) adopt(self, std::nullopt, round_outcome::resume);
        if (options.scheduled_rounds) {
          arm_round_timer(self, svc.config->current()->integer("batch.round_interval_ms"));
        }
        return {
            [self](batch_round_atom) -> std::string {
              auto& st = self->state;
              if (st.d) {
                count_round(self, round_outcome::slot_occupied);
                return "slot_occupied";
              }
              if (st.round_in_flight) return "in_progress";
              start_round(self);
              return "started";
            },
            [self](batch_settle_atom, std::int64_t batch_id) -> std::string {
              auto& st = self->state;
              if (st.d && st.d->state.batch_id == batch_id) {
                if (!st.d->state.cause) st.d->state.settle_requested = true;
                return "settling";
              }
              if (st.d || st.round_in_flight) return "busy";
              adopt(self, batch_id, round_outcome::operator_settle);
              return "settling";
            },
            [self](batch_adopt_atom, std::int64_t batch_id) {
              auto& st = self->state;
              if (st.d || st.round_in_flight) return;  // busy: the batch is adopted by a later round
              adopt(self, batch_id, round_outcome::resume);
            },
            [self](batch_tick t) {
              auto& st = self->state;
              if (t.poll) {
                if (t.generation != st.poll_timer || !st.d) return;
                apply(self, core::on_poll_tick(st.d->state, settings_of(self), now_ms(self)));
                return;
              }
              if (t.generation != st.round_timer) return;
              if (st.options.scheduled_rounds) {
                arm_round_timer(self, st.svc->config->current()->integer("batch.round_interval_ms"));
              }
              start_round(self);
            },
            [self](batch_job_result& r) {
              auto& st = self->state;
              if (r.what == kind::round_prepared) return on_round_prepared(self, r);
              if (!st.d || r.drive != st.d->id) return;  // a result for a drive that ended
              on_result(self, r);
            },
        };
      },
      &svc);
}

}  // namespace changeflow::actors
