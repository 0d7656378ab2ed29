#include "actors/batch_coordinator.hpp"

#include "actors/reconciler.hpp"

#include "effects/file_actions.hpp"

#include "base/answer_guard.hpp"
#include "base/log.hpp"
#include "persistence/operation_repo.hpp"
#include "workflow/batch_decide.hpp"
#include "workflow/poll_schedule.hpp"

#include <caf/all.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

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

/// One batch this coordinator drives: the core's state plus what only the shell needs.
struct drive {
  std::uint64_t id = 0;  // tells this drive's job results and timers from a previous drive's
  batch_status expected = batch_status::RUNNING;
  std::vector<effects::batch_member_change> members;  // with their files (the MR carries them)
  std::string mr_url;
  std::int64_t started_ms = 0;
  std::uint64_t poll_timer = 0;  // generation of this drive's poll timer
  bool poll_armed = false;       // the drive waits for its poll timer (no job in flight)
  bool poll_now = false;         // a webhook came while a job was in flight: the next poll is at once
  core::drive state;
  // What the batch's commit was applied to, when this drive made it. Memory only: a resumed drive
  // reads both versions before a merge.
  messages::commit_base own_commit;
};

struct coordinator_state {
  static inline const char* name = "batch_coordinator";
  runtime::services* svc = nullptr;
  batch_coordinator_options options;
  bool round_in_flight = false;             // a round's look at the database is under way
  std::map<core::partition, drive> drives;  // at most one per partition (I1 per partition)
  std::set<core::partition> claiming;       // a claim or an adoption job for it is under way
  int adoptions_in_flight = 0;              // adoptions whose partition is not known before the load
  std::uint64_t next_drive_id = 0;
  std::uint64_t round_timer = 0;

  drive* find_drive(std::uint64_t id) {
    for (auto& [p, d] : drives) {
      if (d.id == id) return &d;
    }
    return nullptr;
  }
  drive* drive_of_batch(std::int64_t batch_id) {
    for (auto& [p, d] : drives) {
      if (d.state.batch_id == batch_id) return &d;
    }
    return nullptr;
  }
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

/// Who a job's answer is for: copied into its result, and into the failed result when the job ends
/// without one, so every answer frees what its job held (a partition being claimed, an adoption).
struct job_tag {
  kind what = kind::round_prepared;
  std::uint64_t drive = 0;  // 0: a round, claim or adoption job
  core::partition where;    // the partition the job is about, when known before it runs
  bool adoption = false;
  bool holds_claim = false;
};

batch_job_result result_for(const job_tag& tag) {
  batch_job_result out;
  out.what = tag.what;
  out.drive = tag.drive;
  out.partition = tag.where;
  out.adoption = tag.adoption;
  out.holds_claim = tag.holds_claim;
  return out;
}

/// The answer to a job that ended without one (it threw, or was dropped unrun, or found its queue
/// full): a failed result of the same kind, which the coordinator retries like any database or
/// GitLab failure.
batch_job_result failed_result(const job_tag& tag, std::string why) {
  auto out = result_for(tag);
  out.ok = false;
  out.round = round_outcome::error;
  out.mr.outcome = effects::batch_mr_view::call::retryable;
  out.error = out.mr.error = std::move(why);
  return out;
}

batch_job_result lost_result(const job_tag& tag) {
  log::warn("batch.job_lost", {{"job", static_cast<int>(tag.what)}, {"drive", tag.drive}});
  return failed_result(tag, "the job ended without an answer (it threw or was dropped); see worker_pool.job_failed");
}

/// Runs `job` on the database pool and sends its result back; a full queue or a dead connection
/// becomes an error result, never an exception on the actor.
void on_db(self_ptr self, const job_tag& tag, std::function<void(session, batch_job_result&)> job) {
  auto handle = caf::actor_cast<batch_coordinator>(self);
  auto guard = make_answer_guard([handle, tag] { caf::anon_send(handle, lost_result(tag)); });
  // The members a drive's job may move: their status readers on this instance re-read them (a
  // claim's members come back in its result).
  std::vector<std::string> members;
  if (auto* d = self->state.find_drive(tag.drive)) {
    for (const auto& m : d->members) members.push_back(m.operation_id);
  }
  auto* svc = self->state.svc;
  bool queued = svc->db->try_submit([handle, tag, job, guard, svc, members](persistence::db_context& db) {
    auto out = result_for(tag);
    try {
      job(db, out);
    } catch (const std::exception& e) {
      out.ok = false;
      out.round = round_outcome::error;
      out.error = e.what();
    }
    if (svc->row_written) {
      for (const auto& id : members) svc->row_written(id);
      for (const auto& m : out.members) svc->row_written(m.operation_id);
    }
    guard->answered();
    caf::anon_send(handle, std::move(out));
  });
  if (!queued) {
    guard->answered();
    self->send(self, failed_result(tag, "database queue full"));
  }
}

/// Runs `job` on the external pool for drive `d`, with the drive's repository (a client bound to its
/// project and that repository's tokens from the current snapshot).
void on_external(self_ptr self, const drive& d, kind what,
                 std::function<void(clients::external_context&, clients::repository_access&, const config::snapshot&,
                                    batch_job_result&)>
                     job) {
  auto handle = caf::actor_cast<batch_coordinator>(self);
  const job_tag tag{what, d.id, d.state.where};
  auto snap = self->state.svc->config->current();
  auto guard = make_answer_guard([handle, tag] { caf::anon_send(handle, lost_result(tag)); });
  bool queued = self->state.svc->external->try_submit([handle, tag, job, snap, guard](clients::external_context& ext) {
    auto out = result_for(tag);
    try {
      ext.refresh(*snap);
      auto repo = ext.repository(*snap, tag.where.repository);
      job(ext, repo, *snap, out);
    } catch (const std::exception& e) {
      out.ok = false;
      out.mr.outcome = effects::batch_mr_view::call::retryable;
      out.mr.error = std::string("unexpected: ") + e.what();
    }
    guard->answered();
    caf::anon_send(handle, std::move(out));
  });
  if (!queued) {
    guard->answered();
    self->send(self, failed_result(tag, "external worker pool full"));
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

/// A member operation as the batch MR needs it.
effects::batch_member_change member_of(const persistence::operation_row& r) {
  return {r.operation_id, r.subject_id, r.title, r.payload_json, r.created_at_ms, r.batch_attempts};
}

/// The members' rows, in the order of `ids` (claim order = admission order). False (the error
/// recorded in `out`) when the rows cannot be read: a database failure ends the job, it never passes
/// for a batch without members.
bool load_members(session conn, const std::vector<std::string>& ids, batch_job_result& out,
                  std::vector<effects::batch_member_change>& into) {
  auto loaded = persistence::load_operations(conn, ids);
  if (!took(loaded, out)) return false;
  const auto& rows = loaded.value;
  into.clear();
  for (const auto& id : ids) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.operation_id == id; });
    if (it == rows.end()) continue;
    into.push_back(member_of(*it));
  }
  return true;
}

/// The core's numbers from the configuration snapshot (read per decision: hot reload applies).
core::settings settings_of(self_ptr self, const std::string& repository) {
  auto snap = self->state.svc->config->current();
  core::settings s;
  s.max_splits = static_cast<int>(snap->batch().max_splits);
  s.max_attempts = static_cast<int>(snap->batch().max_attempts);
  s.polls = runtime::poll_schedule_from(snap->poll());
  runtime::apply_webhook_interval(s.polls, *snap, repository);
  return s;
}

void arm_round_timer(self_ptr self, std::int64_t delay_ms) {
  auto gen = ++self->state.round_timer;
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(delay_ms, 0)), batch_tick{gen, false, 0});
}

void arm_poll(self_ptr self, drive& d, std::int64_t delay_ms) {
  if (d.poll_now) {
    d.poll_now = false;
    delay_ms = 0;
  }
  d.poll_armed = true;
  auto gen = ++d.poll_timer;
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(delay_ms, 0)), batch_tick{gen, true, d.id});
}

/// The driven batch is settled (or abandoned to another settler): free its partition and run the
/// next round right away (bisection halves and deferred members are waiting).
void end_drive(self_ptr self, drive& d, const std::string& outcome) {
  auto& st = self->state;
  double seconds = static_cast<double>(now_ms(self) - d.started_ms) / 1000.0;
  st.svc->metrics->observe("changeflow_batch_duration_seconds", "Batch duration from claim to settlement",
                           {{"outcome", outcome}}, seconds);
  log::info("batch.settled",
            {{"batch_id", d.state.batch_id}, {"partition", core::to_string(d.state.where)}, {"outcome", outcome}});
  st.drives.erase(d.state.where);  // `d` is gone from here on
  arm_round_timer(self, 0);
}

// -- running what the core decided

void settle_failed(self_ptr self, drive& d, const core::action& a) {
  const auto batch_id = d.state.batch_id;
  const auto expected = d.expected;
  if (a.plan == core::failure_plan::bisect) {
    self->state.svc->metrics->inc("changeflow_batch_splits_total", "Failing batches split in two halves");
  }
  on_db(self, {kind::settled, d.id, d.state.where}, [batch_id, expected, a](session conn, batch_job_result& out) {
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

void run(self_ptr self, drive& d, const core::action& a) {
  const auto batch_id = d.state.batch_id;
  const auto iid = d.state.mr_iid;
  const auto target_branch = d.state.where.target_branch;
  switch (a.what) {
    case act::open_mr: {
      effects::batch_plan plan =
          effects::plan_batch(d.members);  // members are conflict-free here; this rebuilds the actions
      on_external(self, d, kind::mr_opened,
                  [batch_id, plan, target_branch](clients::external_context&, clients::repository_access& repo,
                                                  const config::snapshot&, batch_job_result& out) {
                    out.mr = effects::open_batch_mr(repo, target_branch, batch_id, plan, &out.own_commit);
                  });
      return;
    }
    case act::record_mr: {
      const auto branch = effects::batch_branch(batch_id);
      const auto url = d.mr_url;
      on_db(self, {kind::mr_recorded, d.id, d.state.where},
            [batch_id, iid, branch, url](session conn, batch_job_result& out) {
              take_write(out, persistence::record_batch_mr(conn, batch_id, iid, branch, url));
            });
      return;
    }
    case act::read_mr:
      on_external(self, d, kind::mr_read,
                  [iid](clients::external_context&, clients::repository_access& repo, const config::snapshot&,
                        batch_job_result& out) { out.mr = effects::read_batch_mr(repo, iid); });
      return;
    case act::rebase_mr: {
      auto paths = effects::paths_of(effects::plan_batch(d.members).actions);
      on_external(self, d, kind::rebased,
                  [iid, paths, own_commit = d.own_commit](clients::external_context&, clients::repository_access& repo,
                                                          const config::snapshot&, batch_job_result& out) {
                    out.mr = effects::rebase_batch_mr(repo, iid, paths, own_commit);
                  });
      return;
    }
    case act::approve_and_merge: {
      auto paths = effects::paths_of(effects::plan_batch(d.members).actions);
      on_external(
          self, d, kind::merged,
          [iid, paths, own_commit = d.own_commit](clients::external_context& ext, clients::repository_access& repo,
                                                  const config::snapshot& snap, batch_job_result& out) {
            auto m = effects::approve_and_merge(repo, ext.shared->check_items, snap, iid, paths, own_commit);
            out.merge = m.answer;
            out.mr = m.mr;
          });
      return;
    }
    case act::close_and_reread:
      on_external(self, d, kind::reread,
                  [iid](clients::external_context&, clients::repository_access& repo, const config::snapshot&,
                        batch_job_result& out) { out.mr = effects::close_and_reread(repo, iid); });
      return;
    case act::find_and_close:
      on_external(self, d, kind::reread,
                  [batch_id](clients::external_context&, clients::repository_access& repo, const config::snapshot&,
                             batch_job_result& out) {
                    out.mr = effects::find_batch_mr(repo, batch_id);
                    if (out.mr.outcome == effects::batch_mr_view::call::ok && out.mr.iid)
                      out.mr = effects::close_and_reread(repo, out.mr.iid);
                  });
      return;
    case act::settle_merged: {
      const auto expected = d.expected;
      const auto instance = self->state.svc->instance_id;
      const auto cause = a.text;
      const auto project = d.state.where.repository;
      std::vector<std::string> members;
      for (const auto& m : d.members) members.push_back(m.operation_id);
      auto* metrics = self->state.svc->metrics;
      on_db(self, {kind::settled, d.id, d.state.where},
            [batch_id, expected, iid, cause, instance, project, members, metrics](session conn, batch_job_result& out) {
              take_write(out, persistence::settle_succeeded(conn, batch_id, expected, iid, cause, instance));
              out.settled_as = "succeeded";
              if (!out.ok) return;
              // The batch MR's deploy pipeline may have called back before this settlement made its
              // members MERGED (a coordinator that died between the merge and the settlement, or
              // one that was slow): those deliveries were answered OUT_OF_ORDER. Apply them now, as
              // the request actor does after its own MERGED write, instead of waiting for
              // reconciliation's minimum age.
              for (const auto& id : members) validate_if_already_deployed(conn, id, iid, project, *metrics);
            });
      return;
    }
    case act::settle_failed: settle_failed(self, d, a); return;
    case act::block: {
      const auto expected = d.expected;
      const auto why = a.text;
      on_db(self, {kind::settled, d.id, d.state.where}, [batch_id, expected, why](session conn, batch_job_result& out) {
        take_write(out, persistence::finish_batch(conn, batch_id, expected, batch_status::BLOCKED, why));
        out.settled_as = "blocked";
      });
      return;
    }
    case act::poll_later: arm_poll(self, d, a.delay_ms); return;
    case act::end: end_drive(self, d, a.text); return;
  }
}

/// Takes the core's decision for drive `d`: it becomes what the core says, then its action runs.
void apply(self_ptr self, drive& d, core::decision decision) {
  d.state = std::move(decision.next);
  if (decision.act.what == act::settle_failed || decision.act.what == act::block) {
    log::warn(
        "batch.failed",
        {{"batch_id", d.state.batch_id}, {"partition", core::to_string(d.state.where)}, {"reason", d.state.failure}});
  }
  run(self, d, decision.act);
}

/// A claimed or adopted batch becomes its partition's drive; nullptr when this coordinator already
/// drives that partition (the batch is adopted by a later round instead).
drive* begin_drive(self_ptr self, const batch_job_result& r) {
  auto& st = self->state;
  if (st.drives.count(r.partition)) {
    log::warn("batch.partition_busy", {{"batch_id", r.batch_id}, {"partition", core::to_string(r.partition)}});
    return nullptr;
  }
  drive d;
  d.id = ++st.next_drive_id;
  d.expected = r.status;
  d.members = r.members;
  d.started_ms = now_ms(self);
  d.state.batch_id = r.batch_id;
  d.state.where = r.partition;
  d.state.depth = r.depth;
  d.state.mr_iid = r.mr_iid.value_or(0);
  for (const auto& m : r.members) d.state.members.push_back({m.operation_id, m.batch_attempts});
  return &(st.drives[r.partition] = std::move(d));
}

// -- the round

/// What this coordinator is doing with each partition, for the round's plan.
std::vector<std::pair<core::partition, core::partition_activity>> activity(const coordinator_state& st) {
  std::vector<std::pair<core::partition, core::partition_activity>> out;
  for (const auto& [p, d] : st.drives) out.emplace_back(p, core::partition_activity::driving);
  for (const auto& p : st.claiming) out.emplace_back(p, core::partition_activity::claiming);
  return out;
}

/// The claim of one partition, on the database pool: ONE unit of work in persistence (claim,
/// lineage, plan, defer, mark claimed); the plan is effects::plan_batch (pure).
void claim_partition(self_ptr self, const core::partition& where) {
  auto& st = self->state;
  st.claiming.insert(where);
  auto snap = st.svc->config->current();
  const int max_members = static_cast<int>(snap->batch().max_members);
  const std::string instance = st.svc->instance_id;
  const job_tag tag{kind::round_prepared, 0, where, false, true};
  on_db(self, tag, [max_members, instance, where](session conn, batch_job_result& out) {
    // Members that touch a file an older member touches wait for the next round.
    const persistence::round_planner plan = [](const std::vector<persistence::operation_row>& rows) {
      std::vector<effects::batch_member_change> claimed;
      for (const auto& r : rows) claimed.push_back(member_of(r));
      auto planned = effects::plan_batch(std::move(claimed));
      persistence::round_plan p;
      for (const auto& m : planned.included) p.included.push_back(m.operation_id);
      p.deferred = std::move(planned.deferred);
      return p;
    };
    auto c = persistence::claim_round(conn, where, max_members, {}, plan, instance);
    if (!took(c, out)) return;
    switch (c.value.kind) {
      case persistence::claim_kind::claimed: out.round = round_outcome::claimed; break;
      case persistence::claim_kind::slot_occupied: out.round = round_outcome::slot_occupied; return;
      case persistence::claim_kind::empty: out.round = round_outcome::empty; return;
      default: out.round = round_outcome::preempted; return;
    }
    out.batch_id = c.value.batch_id;
    out.depth = c.value.depth;
    out.deferred = c.value.deferred;
    // Read after the claim: the attempt counts include this batch, and a member closed since the
    // claim read (not moved to BATCH_CLAIMED) is not carried by the MR.
    for (const auto& r : c.value.carried) out.members.push_back(member_of(r));
  });
}

/// Loads a batch to drive it (resume at start, adopt after unblock, operator settle, sweep). A sweep
/// knows the batch's partition and marks it as being claimed here until the batch is loaded.
void adopt(self_ptr self, std::int64_t batch_id, round_outcome outcome,
           const std::optional<core::partition>& known = std::nullopt) {
  auto& st = self->state;
  ++st.adoptions_in_flight;
  if (known) st.claiming.insert(*known);
  const int timeout_s = static_cast<int>(st.svc->config->current()->batch().running_timeout_seconds);
  const job_tag tag{kind::round_prepared, 0, known.value_or(core::partition{}), true, known.has_value()};
  const std::string instance = st.svc->instance_id;
  on_db(self, tag, [batch_id, outcome, timeout_s, instance](session conn, batch_job_result& out) {
    out.batch_id = batch_id;
    if (outcome == round_outcome::resume) {
      // Driven only by its owner: a batch a live peer drives (an unblock asked on this instance,
      // say) is left to that peer, whose next round picks it up.
      auto mine = persistence::own_batch(conn, batch_id, instance);
      if (mine.outcome == persistence::db_outcome::not_found) {
        out.round = round_outcome::empty;
        return;
      }
      if (!took(mine, out)) return;
      if (!mine.value) {
        out.round = round_outcome::slot_occupied;
        return;
      }
    }
    auto r = persistence::load_batch(conn, batch_id);
    if (r.outcome == persistence::db_outcome::not_found) {
      out.round = round_outcome::empty;
      return;
    }
    if (!took(r, out)) return;
    const auto& b = r.value;
    out.partition = b.partition;
    if (b.status != batch_status::RUNNING && b.status != batch_status::BLOCKED) {
      out.round = round_outcome::empty;
      return;
    }
    out.round = outcome;
    if (outcome == round_outcome::resume && b.status == batch_status::RUNNING) {
      // Found at start but already past the running timeout: the sweep settles it instead.
      auto stale = persistence::sweep_running_older_than(conn, timeout_s);
      if (!took(stale, out)) return;
      if (std::find(stale.value.begin(), stale.value.end(), b.id) != stale.value.end())
        out.round = round_outcome::sweep;
    }
    out.depth = b.split_depth;
    out.status = b.status;
    out.mr_iid = b.mr_iid;
    load_members(conn, b.members, out, out.members);
  });
}

/// A round: one lock-free look at the database (stale RUNNING batches, partitions with waiting
/// changes), then a claim in every partition this coordinator neither claims nor drives.
void start_round(self_ptr self) {
  auto& st = self->state;
  if (st.round_in_flight) return;
  st.round_in_flight = true;
  const int timeout_s = static_cast<int>(st.svc->config->current()->batch().running_timeout_seconds);
  const std::string instance = st.svc->instance_id;
  on_db(self, {kind::round_listed}, [timeout_s, instance](session conn, batch_job_result& out) {
    // 1. This coordinator's active batches, with those of instances whose lease expired taken over.
    auto owned = persistence::own_active_batches(conn, instance);
    if (!took(owned, out)) return;
    // 2. Timeout sweep (DB clock): an owned RUNNING batch older than the limit is settled like a
    // failure. A live peer's batch is its own to time out.
    auto stale = persistence::sweep_running_older_than(conn, timeout_s);
    if (!took(stale, out)) return;
    for (const auto& b : owned.value) {
      if (std::find(stale.value.begin(), stale.value.end(), b.id) != stale.value.end()) {
        out.stale.emplace_back(b.id, b.partition);
      } else if (b.status == batch_status::RUNNING) {
        out.owned.emplace_back(b.id, b.partition);
      }
    }
    // 3. Lock-free pre-check per partition: no "take the slot, then roll back" churn where nothing
    // waits.
    auto waiting = persistence::waiting_partitions(conn);
    if (!took(waiting, out)) return;
    out.waiting = std::move(waiting.value);
    out.round = round_outcome::claimed;  // looked: the claims follow
  });
}

void on_round_listed(self_ptr self, const batch_job_result& r) {
  auto& st = self->state;
  st.round_in_flight = false;
  if (r.round == round_outcome::error) {
    log::warn("batch.round_failed", {{"error", r.error}});
    count_round(self, r.round);
    return;
  }
  // A stale batch of a partition this coordinator drives is its own (it keeps driving it to its
  // pipeline timeout); any other is swept, one partition at a time.
  for (const auto& [id, where] : r.stale) {
    if (st.drives.count(where) || st.claiming.count(where)) continue;
    count_round(self, round_outcome::sweep);
    log::warn("batch.sweep", {{"batch_id", id}, {"partition", core::to_string(where)}});
    adopt(self, id, round_outcome::sweep, where);
  }
  // An owned batch nobody here drives: taken over from an instance that died or stopped.
  for (const auto& [id, where] : r.owned) {
    if (st.drives.count(where) || st.claiming.count(where)) continue;
    log::info("batch.take_over", {{"batch_id", id}, {"partition", core::to_string(where)}});
    adopt(self, id, round_outcome::resume, where);
  }
  const auto to_claim = core::partitions_to_claim(r.waiting, activity(st));
  if (r.waiting.empty()) count_round(self, round_outcome::empty);
  for (const auto& where : to_claim) claim_partition(self, where);
}

void on_round_prepared(self_ptr self, const batch_job_result& r) {
  auto& st = self->state;
  if (r.adoption) st.adoptions_in_flight = std::max(0, st.adoptions_in_flight - 1);
  if (r.holds_claim) st.claiming.erase(r.partition);
  switch (r.round) {
    case round_outcome::error:
      log::warn("batch.round_failed", {{"error", r.error}, {"partition", core::to_string(r.partition)}});
      count_round(self, r.round);
      return;
    case round_outcome::sweep: {
      auto* d = begin_drive(self, r);
      if (d) apply(self, *d, core::start_failure(d->state, core::failure_cause::swept, {}));
      return;
    }
    case round_outcome::operator_settle: {
      if (auto* driven = st.drive_of_batch(r.batch_id)) {
        if (!driven->state.cause) driven->state.settle_requested = true;
        return;
      }
      auto* d = begin_drive(self, r);
      if (d) apply(self, *d, core::start_failure(d->state, core::failure_cause::operator_settled, {}));
      return;
    }
    case round_outcome::resume: {
      log::info(
          "batch.resume",
          {{"batch_id", r.batch_id}, {"partition", core::to_string(r.partition)}, {"mr_iid", r.mr_iid.value_or(0)}});
      if (r.status == batch_status::BLOCKED) return;  // BLOCKED keeps the slot until an operator acts
      if (st.drive_of_batch(r.batch_id)) return;      // already driven here
      auto* d = begin_drive(self, r);
      if (d) apply(self, *d, core::begin(d->state, now_ms(self)));
      return;
    }
    case round_outcome::claimed: {
      count_round(self, r.round);
      st.svc->metrics->observe("changeflow_batch_size", "Members per claimed batch", {},
                               static_cast<double>(r.members.size()));
      log::info("batch.claimed", {{"batch_id", r.batch_id},
                                  {"partition", core::to_string(r.partition)},
                                  {"members", r.members.size()},
                                  {"deferred", r.deferred},
                                  {"depth", r.depth}});
      auto* d = begin_drive(self, r);
      if (d) apply(self, *d, core::begin(d->state, now_ms(self)));
      return;
    }
    case round_outcome::empty:
    case round_outcome::slot_occupied:
    case round_outcome::preempted: count_round(self, r.round); return;
  }
}

/// A job's result for a driven batch, handed to the core.
void on_result(self_ptr self, drive& d, batch_job_result& r) {
  const auto s = settings_of(self, d.state.where.repository);
  const auto now = now_ms(self);
  switch (r.what) {
    case kind::mr_opened:
      if (r.mr.outcome == effects::batch_mr_view::call::ok) {
        d.mr_url = r.mr.web_url;
        if (r.own_commit.known()) d.own_commit = std::move(r.own_commit);
      }
      apply(self, d, core::on_mr_opened(d.state, r.mr, s, now));
      return;
    case kind::mr_recorded:
      if (!r.ok) log::warn("batch.record_mr_refused", {{"batch_id", d.state.batch_id}, {"error", r.error}});
      apply(self, d, core::on_mr_recorded(d.state, r.ok, r.preempted));
      return;
    case kind::mr_read: apply(self, d, core::on_mr_read(d.state, r.mr, s, now)); return;
    case kind::rebased: apply(self, d, core::on_rebase_requested(d.state, r.mr, s, now)); return;
    case kind::merged: apply(self, d, core::on_merge(d.state, r.merge, r.mr, s, now)); return;
    case kind::reread: apply(self, d, core::on_reread(d.state, r.mr, s)); return;
    case kind::settled:
      if (!r.ok) log::warn("batch.settle_not_applied", {{"batch_id", d.state.batch_id}, {"error", r.error}});
      apply(self, d, core::on_settled(d.state, r.ok, r.preempted, r.settled_as, s));
      return;
    case kind::round_listed:
    case kind::active_listed:
    case kind::round_prepared: return;
  }
}

/// Start-up: every active batch this instance owns, or takes over, is adopted (each in its own partition).
void resume_active(self_ptr self) {
  const std::string instance = self->state.svc->instance_id;
  on_db(self, {kind::active_listed}, [instance](session conn, batch_job_result& out) {
    auto r = persistence::own_active_batches(conn, instance);
    if (!took(r, out)) return;
    for (const auto& b : r.value) out.active.push_back(b.id);
  });
}

}  // namespace

batch_coordinator spawn_batch_coordinator(runtime::services& svc, batch_coordinator_options options) {
  // `svc` travels as a spawn argument, not a capture: CAF 0.17 binds an actor function spawned
  // without arguments to a null std::tuple<> pointer (UBSan: reference binding to null pointer).
  return svc.system->spawn(
      [options](self_ptr self, runtime::services* svc_ptr) -> batch_coordinator::behavior_type {
        auto& svc = *svc_ptr;
        self->state.svc = &svc;
        self->state.options = options;
        if (options.resume_on_start) resume_active(self);
        if (options.scheduled_rounds) {
          arm_round_timer(self, svc.config->current()->batch().round_interval_ms);
        }
        return {
            [self](batch_round_atom) -> std::string {
              if (self->state.round_in_flight) return "in_progress";
              start_round(self);
              return "started";
            },
            [self](batch_settle_atom, std::int64_t batch_id) -> std::string {
              auto& st = self->state;
              if (auto* d = st.drive_of_batch(batch_id)) {
                if (!d->state.cause) d->state.settle_requested = true;
                return "settling";
              }
              if (st.adoptions_in_flight > 0) return "busy";
              adopt(self, batch_id, round_outcome::operator_settle);
              return "settling";
            },
            [self](batch_adopt_atom, std::int64_t batch_id) {
              if (self->state.drive_of_batch(batch_id)) return;
              adopt(self, batch_id, round_outcome::resume);
            },
            [self](batch_webhook_atom, const std::string& project, std::int64_t mr_iid) {
              for (auto& [where, d] : self->state.drives) {
                if (where.repository != project || d.state.mr_iid != mr_iid) continue;
                self->state.svc->metrics->inc("changeflow_webhook_wakes_total",
                                              "Waits a GitLab webhook ended before their poll");
                if (!d.poll_armed) {
                  d.poll_now = true;  // a job is in flight: its answer arms the next poll, at once
                  return;
                }
                // The webhook makes the next poll "now": a tick of the current generation, the
                // armed timer's later tick then finds the generation moved on.
                d.poll_armed = false;
                auto gen = ++d.poll_timer;
                self->send(self, batch_tick{gen, true, d.id});
                return;
              }
            },
            [self](batch_tick t) {
              auto& st = self->state;
              if (t.poll) {
                auto* d = st.find_drive(t.drive);
                if (!d || t.generation != d->poll_timer) return;
                d->poll_armed = false;
                apply(self, *d,
                      core::on_poll_tick(d->state, settings_of(self, d->state.where.repository), now_ms(self)));
                return;
              }
              if (t.generation != st.round_timer) return;
              if (st.options.scheduled_rounds) {
                arm_round_timer(self, st.svc->config->current()->batch().round_interval_ms);
              }
              start_round(self);
            },
            [self](batch_job_result& r) {
              auto& st = self->state;
              switch (r.what) {
                case kind::round_listed: return on_round_listed(self, r);
                case kind::active_listed:
                  if (!r.ok) log::warn("batch.resume_failed", {{"error", r.error}});
                  for (auto id : r.active) adopt(self, id, round_outcome::resume);
                  return;
                case kind::round_prepared: return on_round_prepared(self, r);
                default: break;
              }
              auto* d = st.find_drive(r.drive);
              if (!d) return;  // a result for a drive that ended
              on_result(self, *d, r);
            },
        };
      },
      &svc);
}

}  // namespace changeflow::actors
