#include "actors/batch_coordinator.hpp"

#include "base/answer_guard.hpp"
#include "base/log.hpp"
#include "persistence/operation_repo.hpp"
#include "workflow/poll_schedule.hpp"

#include <caf/all.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <chrono>

namespace changeflow::actors {

std::string_view describe(failure_cause c) {
  switch (c) {
    case failure_cause::pipeline_failed: return "pipeline failed";
    case failure_cause::rebase_conflict: return "rebase conflict with the target branch";
    case failure_cause::commit_refused: return "GitLab refused the batch commit";
    case failure_cause::approval_refused: return "approval refused";
    case failure_cause::merge_refused: return "merge refused";
    case failure_cause::mr_closed: return "MR closed";
    case failure_cause::gitlab_failing: return "GitLab kept failing";
    case failure_cause::pipeline_timeout: return "pipeline did not finish within poll.timeout_ms";
    case failure_cause::swept: return "running timeout (sweep)";
    case failure_cause::operator_settled: return "settled by an operator";
    case failure_cause::no_members: return "no member could be loaded";
  }
  return "batch failed";
}

failure_plan plan_failure(failure_cause cause, std::size_t members, int depth, int max_splits) {
  switch (cause) {
    case failure_cause::pipeline_failed:
      if (members <= 1) return failure_plan::fail_alone;
      if (depth < max_splits) return failure_plan::bisect;
      return failure_plan::fail_all;
    case failure_cause::rebase_conflict:
    case failure_cause::commit_refused:
      if (members > 1 && depth < max_splits) return failure_plan::bisect;
      return failure_plan::requeue_bounded;
    default: return failure_plan::requeue_bounded;
  }
}

requeue_split split_by_attempts(const std::vector<batch_member_change>& members, int max_attempts) {
  requeue_split out;
  for (const auto& m : members) (m.batch_attempts >= max_attempts ? out.leave : out.requeue).push_back(m.operation_id);
  return out;
}

std::vector<std::vector<std::string>> halves(const std::vector<batch_member_change>& members) {
  std::vector<std::vector<std::string>> out(2);
  const std::size_t mid = (members.size() + 1) / 2;
  for (std::size_t i = 0; i < members.size(); ++i) out[i < mid ? 0 : 1].push_back(members[i].operation_id);
  if (out[1].empty()) out.pop_back();
  return out;
}

namespace {

using persistence::batch_status;
using persistence::session;
using kind = batch_job_result::kind;

/// The batch this coordinator drives right now.
struct drive {
  std::uint64_t id = 0;
  std::int64_t batch_id = 0;
  int depth = 0;
  batch_status expected = batch_status::RUNNING;
  std::vector<batch_member_change> members;
  std::int64_t mr_iid = 0;
  std::string mr_url;
  int polls = 0;
  std::int64_t wait_started_ms = 0;
  std::int64_t started_ms = 0;
  int call_failures = 0;
  bool settle_requested = false;
  // Set once the failure path started: the typed cause and GitLab's detail.
  std::optional<std::string> failure;
  failure_cause cause = failure_cause::gitlab_failing;
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

void count_round(self_ptr self, const std::string& outcome) {
  self->state.svc->metrics->inc("changeflow_batch_rounds_total", "Batch rounds by outcome", {{"outcome", outcome}});
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
  out.round_outcome = "error";
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
      out.round_outcome = "error";
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
    out.round_outcome = "error";
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

template <class T>
T value_or_throw(persistence::db_result<T> r) {
  if (!r.ok()) throw std::runtime_error(std::string(persistence::to_string(r.outcome)) + ": " + r.error.message);
  return std::move(r.value);
}

/// `claimed_by` set: only operations BATCH_CLAIMED by that batch.
std::vector<batch_member_change> load_members(session conn, const std::vector<std::string>& ids,
                                              std::optional<std::int64_t> claimed_by = std::nullopt) {
  auto rows = value_or_throw(persistence::load_operations(conn, ids));
  std::vector<batch_member_change> out;
  // Keep the order of `ids` (claim order = admission order).
  for (const auto& id : ids) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.operation_id == id; });
    if (it == rows.end()) continue;
    if (claimed_by && (it->step != workflow::step::BATCH_CLAIMED || it->batch_id != claimed_by)) continue;
    out.push_back(
        {it->operation_id, it->subject_id, it->title, it->payload_json, it->created_at_ms, it->batch_attempts});
  }
  return out;
}

workflow::poll_schedule schedule_from(const config::snapshot& snap) {
  workflow::poll_schedule s;
  s.short_interval_ms = snap.int_or("poll.short_interval_ms", s.short_interval_ms);
  s.short_attempts = static_cast<int>(snap.int_or("poll.short_attempts", s.short_attempts));
  s.long_interval_ms = snap.int_or("poll.long_interval_ms", s.long_interval_ms);
  s.timeout_ms = snap.int_or("poll.timeout_ms", s.timeout_ms);
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

void start_round(self_ptr self);
void open_mr(self_ptr self);
void poll_now(self_ptr self);
void start_failure(self_ptr self, failure_cause cause, std::string detail = {});

/// The driven batch is settled (or abandoned to another settler): free the actor and run the next
/// round right away (bisection halves and deferred members are waiting).
void end_drive(self_ptr self, const std::string& outcome) {
  auto& st = self->state;
  if (st.d) {
    double seconds = static_cast<double>(now_ms(self) - st.d->started_ms) / 1000.0;
    st.svc->metrics->observe("changeflow_batch_duration_seconds", "Batch duration from claim to settlement",
                             {{"outcome", outcome}}, seconds);
    log::info("batch.settled", {{"batch_id", st.d->batch_id}, {"outcome", outcome}});
  }
  st.d.reset();
  arm_round_timer(self, 0);
}

void begin_drive(self_ptr self, const batch_job_result& r) {
  auto& st = self->state;
  drive d;
  d.id = ++st.next_drive_id;
  d.batch_id = r.batch_id;
  d.depth = r.depth;
  d.expected = r.status;
  d.members = r.members;
  d.mr_iid = r.mr_iid.value_or(0);
  d.started_ms = now_ms(self);
  d.wait_started_ms = d.started_ms;
  st.d = std::move(d);
}

// -- the round

void start_round(self_ptr self) {
  auto& st = self->state;
  if (st.round_in_flight || st.d) return;
  st.round_in_flight = true;
  auto snap = st.svc->config->current();
  const int max_members = static_cast<int>(std::max<std::int64_t>(1, snap->int_or("batch.max_members", 50)));
  const int timeout_s = static_cast<int>(snap->int_or("batch.running_timeout_seconds", 3600));
  const std::string instance = st.svc->instance_id;
  on_db(self, kind::round_prepared, [max_members, timeout_s, instance](session conn, batch_job_result& out) {
    // 1. Timeout sweep (DB clock): a RUNNING batch older than the limit is settled like a failure.
    auto stale = value_or_throw(persistence::sweep_running_older_than(conn, timeout_s));
    if (!stale.empty()) {
      auto b = value_or_throw(persistence::load_batch(conn, stale.front()));
      out.round_outcome = "sweep";
      out.batch_id = b.id;
      out.depth = b.split_depth;
      out.mr_iid = b.mr_iid;
      out.members = load_members(conn, b.members);
      return;
    }
    // 2. Lock-free pre-check: no "take the slot, then roll back" churn when nothing waits.
    if (!value_or_throw(persistence::has_waiting(conn))) {
      out.round_outcome = "empty";
      return;
    }
    // 3. The claim transaction.
    auto c = value_or_throw(persistence::claim(conn, max_members));
    out.round_outcome = std::string(persistence::to_string(c.kind));
    if (c.kind != persistence::claim_kind::claimed) return;
    out.batch_id = c.batch_id;
    out.depth = value_or_throw(persistence::record_lineage(conn, c.batch_id));
    std::vector<std::string> ids;
    for (const auto& m : c.members) ids.push_back(m.operation_id);
    auto plan = plan_batch(load_members(conn, ids));
    // Members that touch a file an older member touches wait for the next round.
    value_or_throw(persistence::defer_members(conn, c.batch_id, plan.deferred));
    out.deferred = plan.deferred.size();
    value_or_throw(persistence::mark_members_claimed(conn, c.batch_id, instance));
    // Re-read after the claim: the attempt counts include this batch, and a member closed since
    // the claim read (not moved to BATCH_CLAIMED) is not carried by the MR.
    std::vector<std::string> included;
    for (const auto& m : plan.included) included.push_back(m.operation_id);
    out.members = load_members(conn, included, c.batch_id);
  });
}

void on_round_prepared(self_ptr self, batch_job_result& r) {
  auto& st = self->state;
  st.round_in_flight = false;
  if (r.round_outcome == "error") {
    log::warn("batch.round_failed", {{"error", r.error}});
    count_round(self, "error");
    return;
  }
  if (r.round_outcome == "sweep") {
    count_round(self, "sweep");
    log::warn("batch.sweep", {{"batch_id", r.batch_id}});
    begin_drive(self, r);
    start_failure(self, failure_cause::swept);
    return;
  }
  if (r.round_outcome == "resume") {
    log::info("batch.resume", {{"batch_id", r.batch_id}, {"mr_iid", r.mr_iid.value_or(0)}});
    begin_drive(self, r);
    if (st.d->expected == batch_status::BLOCKED) {
      st.d.reset();  // BLOCKED keeps the slot until an operator settles or unblocks it
      return;
    }
    if (st.d->mr_iid)
      poll_now(self);
    else
      open_mr(self);
    return;
  }
  count_round(self, r.round_outcome);
  if (r.round_outcome != "claimed") return;
  st.svc->metrics->observe("changeflow_batch_size", "Members per claimed batch", {},
                           static_cast<double>(r.members.size()));
  log::info("batch.claimed",
            {{"batch_id", r.batch_id}, {"members", r.members.size()}, {"deferred", r.deferred}, {"depth", r.depth}});
  begin_drive(self, r);
  if (st.d->members.empty()) {
    start_failure(self, failure_cause::no_members);
    return;
  }
  open_mr(self);
}

// -- the MR

void open_mr(self_ptr self) {
  auto& d = *self->state.d;
  batch_plan plan = plan_batch(d.members);  // members are conflict-free here; this rebuilds the actions
  const auto batch_id = d.batch_id;
  on_external(self, kind::mr_opened,
              [batch_id, plan](clients::external_context& ext, const config::snapshot& snap, batch_job_result& out) {
                out.mr = open_batch_mr(ext, snap, batch_id, plan);
              });
}

/// A failed call: a refusal (4xx, counted as `refused_cause`) or too many retryable failures end in
/// the failure path; otherwise the next poll tick re-runs the step the batch is at (open the MR,
/// read it).
void retry_or_fail(self_ptr self, const batch_mr_view& mr, failure_cause refused_cause) {
  auto& d = *self->state.d;
  if (mr.outcome == batch_mr_view::call::refused) {
    start_failure(self, refused_cause, mr.error);
    return;
  }
  if (++d.call_failures > 8) {
    start_failure(self, failure_cause::gitlab_failing, mr.error);
    return;
  }
  arm_poll(self, std::min<std::int64_t>(5000, 100LL << std::min(d.call_failures, 6)));
}

void on_mr_opened(self_ptr self, batch_job_result& r) {
  auto& d = *self->state.d;
  if (r.mr.outcome != batch_mr_view::call::ok) {
    retry_or_fail(self, r.mr, failure_cause::commit_refused);
    return;
  }
  d.call_failures = 0;
  d.mr_iid = r.mr.iid;
  d.mr_url = r.mr.web_url;
  d.wait_started_ms = now_ms(self);
  d.polls = 0;
  const auto batch_id = d.batch_id;
  const auto iid = r.mr.iid;
  const auto branch = batch_branch(batch_id);
  const auto url = r.mr.web_url;
  on_db(self, kind::mr_recorded, [batch_id, iid, branch, url](session conn, batch_job_result& out) {
    auto w = persistence::record_batch_mr(conn, batch_id, iid, branch, url);
    take_write(out, w);
  });
}

void on_mr_recorded(self_ptr self, batch_job_result& r) {
  if (!r.ok) {
    // Preempted: the batch was settled elsewhere (sweep, operator, another instance). Stop driving.
    log::warn("batch.record_mr_refused", {{"batch_id", self->state.d->batch_id}, {"error", r.error}});
    if (r.preempted) {
      end_drive(self, "preempted");
      return;
    }
  }
  poll_now(self);
}

void poll_now(self_ptr self) {
  const auto iid = self->state.d->mr_iid;
  on_external(self, kind::mr_read,
              [iid](clients::external_context& ext, const config::snapshot&, batch_job_result& out) {
                out.mr = read_batch_mr(ext, iid);
              });
}

void schedule_next_poll(self_ptr self) {
  auto& d = *self->state.d;
  auto schedule = schedule_from(*self->state.svc->config->current());
  auto delay = schedule.next_delay(d.polls++, now_ms(self) - d.wait_started_ms);
  if (!delay) {
    start_failure(self, failure_cause::pipeline_timeout);
    return;
  }
  arm_poll(self, *delay);
}

void settle_success(self_ptr self, const std::string& cause) {
  auto& d = *self->state.d;
  const auto batch_id = d.batch_id;
  const auto expected = d.expected;
  const auto iid = d.mr_iid;
  const auto instance = self->state.svc->instance_id;
  on_db(self, kind::settled, [batch_id, expected, iid, cause, instance](session conn, batch_job_result& out) {
    auto w = persistence::settle_succeeded(conn, batch_id, expected, iid, cause, instance);
    take_write(out, w);
    out.round_outcome = "succeeded";
  });
}

void on_mr_read(self_ptr self, batch_job_result& r) {
  auto& d = *self->state.d;
  if (r.mr.outcome != batch_mr_view::call::ok) {
    // A 4xx reading (or rebasing) the batch's own MR: nothing a member carries explains it.
    retry_or_fail(self, r.mr, failure_cause::gitlab_failing);
    return;
  }
  d.call_failures = 0;
  if (d.settle_requested) {
    start_failure(self, failure_cause::operator_settled);
    return;
  }
  switch (classify(r.mr)) {
    case batch_verdict::merged: settle_success(self, "batch MR !" + std::to_string(d.mr_iid) + " merged"); return;
    case batch_verdict::closed: start_failure(self, failure_cause::mr_closed, "closed outside changeflow"); return;
    case batch_verdict::pipeline_failed:
      start_failure(self, failure_cause::pipeline_failed, r.mr.pipeline_status + " on " + r.mr.sha);
      return;
    case batch_verdict::conflict: start_failure(self, failure_cause::rebase_conflict, r.mr.merge_error); return;
    case batch_verdict::needs_rebase: {
      const auto iid = d.mr_iid;
      on_external(self, kind::mr_read,
                  [iid](clients::external_context& ext, const config::snapshot&, batch_job_result& out) {
                    out.mr = rebase_batch_mr(ext, iid);
                    // The rebase runs asynchronously: report "running" so the poll continues.
                    if (out.mr.outcome == batch_mr_view::call::ok && out.mr.state == "opened") {
                      out.mr.pipeline_status.clear();
                      out.mr.detailed_merge_status = "checking";
                      out.mr.has_conflicts = false;
                    }
                  });
      return;
    }
    case batch_verdict::ready: {
      const auto iid = d.mr_iid;
      on_external(self, kind::merged,
                  [iid](clients::external_context& ext, const config::snapshot& snap, batch_job_result& out) {
                    auto m = approve_and_merge(ext, snap, iid);
                    out.merge = m.answer;
                    out.mr = m.mr;
                  });
      return;
    }
    case batch_verdict::running: schedule_next_poll(self); return;
  }
}

void on_merged(self_ptr self, batch_job_result& r) {
  auto& d = *self->state.d;
  switch (r.merge) {
    case merge_answer::merged: settle_success(self, "batch MR !" + std::to_string(d.mr_iid) + " merged"); return;
    case merge_answer::closed: start_failure(self, failure_cause::mr_closed, "closed before the merge"); return;
    case merge_answer::approval_refused: start_failure(self, failure_cause::approval_refused, r.mr.error); return;
    case merge_answer::refused: start_failure(self, failure_cause::merge_refused, r.mr.error); return;
    case merge_answer::retryable:
      if (++d.call_failures > 8) {
        start_failure(self, failure_cause::gitlab_failing, "merge: " + r.mr.error);
        return;
      }
      [[fallthrough]];
    case merge_answer::not_yet:
    case merge_answer::needs_rebase: schedule_next_poll(self); return;
  }
}

// -- settlement of a failure

void start_failure(self_ptr self, failure_cause cause, std::string detail) {
  auto& d = *self->state.d;
  if (!d.failure) {
    d.failure = std::string(describe(cause)) + (detail.empty() ? "" : ": " + detail);
    d.cause = cause;
    d.call_failures = 0;  // a retry of the failure path keeps counting
  }
  if (!d.mr_iid) {
    // No MR was ever recorded: look for one on the batch branch before deciding (a crash may have
    // come between the MR creation and its recording).
    const auto batch_id = d.batch_id;
    on_external(self, kind::reread,
                [batch_id](clients::external_context& ext, const config::snapshot&, batch_job_result& out) {
                  out.mr = find_batch_mr(ext, batch_id);
                  if (out.mr.outcome == batch_mr_view::call::ok && out.mr.iid)
                    out.mr = close_and_reread(ext, out.mr.iid);
                });
    return;
  }
  const auto iid = d.mr_iid;
  on_external(self, kind::reread,
              [iid](clients::external_context& ext, const config::snapshot&, batch_job_result& out) {
                out.mr = close_and_reread(ext, iid);
              });
}

void on_reread(self_ptr self, batch_job_result& r) {
  auto& d = *self->state.d;
  if (r.mr.outcome != batch_mr_view::call::ok) {
    if (++d.call_failures <= 8) {
      // The next poll tick re-runs the close + re-read (d.failure is set).
      arm_poll(self, std::min<std::int64_t>(5000, 100LL << std::min(d.call_failures, 6)));
      return;
    }
    // The MR's final state cannot be read: a human decides. BLOCKED keeps the slot.
    const auto batch_id = d.batch_id;
    const auto expected = d.expected;
    auto why = "blocked: MR state unknown after failure (" + *d.failure + "): " + r.mr.error;
    on_db(self, kind::settled, [batch_id, expected, why](session conn, batch_job_result& out) {
      auto w = persistence::finish_batch(conn, batch_id, expected, batch_status::BLOCKED, why);
      take_write(out, w);
      out.round_outcome = "blocked";
    });
    return;
  }
  if (r.mr.iid) d.mr_iid = r.mr.iid;
  if (r.mr.state == "merged") {
    // Merged wins: the merge landed before (or despite) the close.
    settle_success(self, "batch MR !" + std::to_string(d.mr_iid) + " merged (merged wins over the failure)");
    return;
  }
  auto snap = self->state.svc->config->current();
  const int max_splits = static_cast<int>(snap->int_or("batch.max_splits", 6));
  const auto configured_attempts = snap->int_or("batch.max_attempts", 3);
  const int max_attempts = configured_attempts > 0 ? static_cast<int>(configured_attempts) : 3;
  const auto plan = plan_failure(d.cause, d.members.size(), d.depth, max_splits);
  const auto batch_id = d.batch_id;
  const auto expected = d.expected;
  const auto reason = *d.failure;
  std::vector<std::vector<std::string>> groups;
  if (plan == failure_plan::bisect) {
    groups = halves(d.members);
    self->state.svc->metrics->inc("changeflow_batch_splits_total", "Failing batches split in two halves");
  }
  requeue_split bounded;
  if (plan == failure_plan::requeue_bounded) bounded = split_by_attempts(d.members, max_attempts);
  const auto leaving_cause =
      reason + " (no batch attempts left: batch.max_attempts = " + std::to_string(max_attempts) + ")";
  on_db(self, kind::settled,
        [batch_id, expected, reason, plan, groups, bounded, leaving_cause](session conn, batch_job_result& out) {
          persistence::db_result<int> w;
          switch (plan) {
            case failure_plan::bisect:
              w = persistence::requeue_members(conn, batch_id, groups, "bisect: " + reason);
              out.round_outcome = "split";
              break;
            case failure_plan::fail_alone:
              w = persistence::requeue_members(conn, batch_id, {}, "failed alone: " + reason);
              out.round_outcome = "failed_alone";
              break;
            case failure_plan::fail_all:
              w = persistence::settle_failed_batch(conn, batch_id, expected, persistence::member_reset::remove,
                                                   "split bound reached: " + reason);
              out.round_outcome = "failed";
              break;
            case failure_plan::requeue_bounded:
              w = persistence::settle_failed_batch(conn, batch_id, expected, persistence::member_reset::requeue, reason,
                                                   bounded.leave, leaving_cause);
              out.round_outcome = bounded.leave.empty() ? "requeued" : "attempts_exhausted";
              break;
          }
          take_write(out, w);
        });
}

void on_settled(self_ptr self, batch_job_result& r) {
  if (!r.ok) {
    // Preempted: another settler won (sweep, operator, another instance): nothing else to do.
    // Anything else (database down): try the settlement again on the next tick via the failure path.
    log::warn("batch.settle_not_applied", {{"batch_id", self->state.d->batch_id}, {"error", r.error}});
    if (!r.preempted && ++self->state.d->call_failures <= 8) {
      arm_poll(self, 500);
      return;
    }
    end_drive(self, "preempted");
    return;
  }
  end_drive(self, r.round_outcome);
}

/// A poll tick: continue wherever the driven batch is.
void on_poll_tick(self_ptr self) {
  auto& d = *self->state.d;
  if (d.failure) {
    // Retrying the failure path (close + re-read, or the settlement write).
    start_failure(self, d.cause);  // d.failure is kept
    return;
  }
  if (!d.mr_iid) {
    open_mr(self);
    return;
  }
  poll_now(self);
}

/// Loads a batch to drive it (resume at start, adopt after unblock, operator settle).
void adopt(self_ptr self, std::optional<std::int64_t> batch_id, std::string outcome) {
  auto& st = self->state;
  st.round_in_flight = true;
  const int timeout_s = static_cast<int>(st.svc->config->current()->int_or("batch.running_timeout_seconds", 3600));
  on_db(self, kind::round_prepared, [batch_id, outcome, timeout_s](session conn, batch_job_result& out) {
    std::optional<persistence::batch_row> b;
    if (batch_id) {
      auto r = persistence::load_batch(conn, *batch_id);
      if (r.ok()) b = std::move(r.value);
    } else {
      b = value_or_throw(persistence::find_active_batch(conn));
    }
    if (!b || (b->status != batch_status::RUNNING && b->status != batch_status::BLOCKED)) {
      out.round_outcome = "empty";
      return;
    }
    out.round_outcome = outcome;
    if (outcome == "resume" && b->status == batch_status::RUNNING) {
      // Found at start but already past the running timeout: the sweep settles it instead.
      auto snapshot_timeout = timeout_s;
      auto stale = value_or_throw(persistence::sweep_running_older_than(conn, snapshot_timeout));
      if (std::find(stale.begin(), stale.end(), b->id) != stale.end()) out.round_outcome = "sweep";
    }
    out.batch_id = b->id;
    out.depth = b->split_depth;
    out.status = b->status;
    out.mr_iid = b->mr_iid;
    out.members = load_members(conn, b->members);
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
        if (options.resume_on_start) adopt(self, std::nullopt, "resume");
        if (options.scheduled_rounds) {
          arm_round_timer(self, svc.config->current()->int_or("batch.round_interval_ms", 5000));
        }
        return {
            [self](batch_round_atom) -> std::string {
              auto& st = self->state;
              if (st.d) {
                count_round(self, "slot_occupied");
                return "slot_occupied";
              }
              if (st.round_in_flight) return "in_progress";
              start_round(self);
              return "started";
            },
            [self](batch_settle_atom, std::int64_t batch_id) -> std::string {
              auto& st = self->state;
              if (st.d && st.d->batch_id == batch_id) {
                if (!st.d->failure) st.d->settle_requested = true;
                return "settling";
              }
              if (st.d || st.round_in_flight) return "busy";
              adopt(self, batch_id, "operator_settle");
              return "settling";
            },
            [self](batch_adopt_atom, std::int64_t batch_id) {
              auto& st = self->state;
              if (st.d || st.round_in_flight) return;  // the next round's resume path is not needed: busy
              adopt(self, batch_id, "resume");
            },
            [self](batch_tick t) {
              auto& st = self->state;
              if (t.poll) {
                if (t.generation != st.poll_timer || !st.d) return;
                on_poll_tick(self);
                return;
              }
              if (t.generation != st.round_timer) return;
              if (st.options.scheduled_rounds) {
                arm_round_timer(self, st.svc->config->current()->int_or("batch.round_interval_ms", 5000));
              }
              start_round(self);
            },
            [self](batch_job_result& r) {
              auto& st = self->state;
              if (r.what == kind::round_prepared) {
                if (r.round_outcome == "operator_settle") {
                  st.round_in_flight = false;
                  begin_drive(self, r);
                  start_failure(self, failure_cause::operator_settled);
                  return;
                }
                on_round_prepared(self, r);
                return;
              }
              if (!st.d || r.drive != st.d->id) return;  // a result for a drive that ended
              switch (r.what) {
                case kind::mr_opened: on_mr_opened(self, r); return;
                case kind::mr_recorded: on_mr_recorded(self, r); return;
                case kind::mr_read: on_mr_read(self, r); return;
                case kind::merged: on_merged(self, r); return;
                case kind::reread: on_reread(self, r); return;
                case kind::settled: on_settled(self, r); return;
                case kind::round_prepared: return;
              }
            },
        };
      },
      &svc);
}

}  // namespace changeflow::actors
