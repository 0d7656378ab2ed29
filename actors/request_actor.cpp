#include "actors/request_actor.hpp"

#include "actors/reconciler.hpp"
#include "actors/registry.hpp"
#include "base/answer_guard.hpp"
#include "base/log.hpp"
#include "effects/external_calls.hpp"
#include "persistence/errors.hpp"
#include "workflow/webhook_rule.hpp"

#include <caf/all.hpp>
#include <caf/stateful_actor.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <deque>
#include <memory>
#include <utility>

namespace changeflow::actors {

namespace {

using persistence::db_outcome;
using workflow::step;

struct request_state {
  static inline const char* name = "request_actor";
  runtime::services* svc = nullptr;
  workflow::operation_state op;
  std::string payload_json;
  std::string requester;
  std::string repository;
  std::string target_branch;
  std::int64_t spawned_ms = 0;
  // At most one persist, call or reload is in flight; events that need the actor meanwhile set flags.
  bool busy = false;
  bool reload_pending = false;
  // Stopping for a passivated wait: out of the registry, its last message (a wake of the current
  // timer generation) sent to itself. A nudge that was sent before it left the registry comes
  // before that message and brings it back (retire, unretire).
  bool retiring = false;
  // The next re-read must re-run the step even if the row is as this actor last knew it: a write
  // was dropped or lost its guard. A re-read asked for by a nudge alone leaves a known row's wait be.
  bool reload_must_resume = false;
  // The current timer fired while a job was in flight; the next decision point runs the step.
  bool resume_pending = false;
  // A nudge that came while a job was in flight and named what its writer committed (step and
  // version) and found: when that job ends with this actor at the version found, the nudge is taken
  // as read instead of re-reading the row. Any other nudge or reason to re-read clears it.
  std::optional<messages::row_changed> nudged;
  // A webhook ended the current wait while a call or write was in flight: the next timer fires now.
  bool wake_now = false;
  std::uint64_t timer_generation = 0;
  // A wait of days came due while a re-read was pending (a nudge during the write before it): it is
  // neither armed nor passivated until that read says whether the row is as this actor wrote it.
  bool wait_unarmed = false;
  // The wait after the transition in flight started with its write (start_wait_with_commit): the
  // generation of its timer, which runs already; the step it ends runs once the write has
  // committed. 0: none.
  std::uint64_t wait_generation = 0;
  // Effects waiting for the transition that precedes them to commit.
  std::vector<workflow::effect> after_commit;
  // Heap-held: a transition_request is ~400 bytes and almost every actor, most of the time, has none
  // pending (an empty std::optional would still carry those bytes in each of 100,000 waiting actors).
  std::unique_ptr<persistence::transition_request> pending_write;
  // A step entered in memory only, to be written with the next one in the same commit
  // (workflow::transition_out::with_next): st.op.current names it while st.op.version is still the
  // row's. The next write (a step, or a retry's failed attempt) carries it as its `before`; a
  // re-read of the row drops it, and an actor holding one never passivates.
  std::shared_ptr<const persistence::transition_request> held;
  int persist_failures = 0;
  // Durability: the write fence (owner + lease epoch) every transition carries.
  std::string owner_instance;
  std::int64_t lease_epoch = 0;
  std::string last_note;
  std::string last_error;
  // What a write that lost to another writer had just created remotely (an MR, an approval request)
  // and the row does not know yet. If the row turns out to have been cancelled or closed meanwhile,
  // nobody else will ever withdraw it: this actor does, before it stops.
  std::optional<std::int64_t> unrecorded_mr;
  std::string unrecorded_approval;
  // What the change's commit was applied to, when this actor's create_mr made it. Memory only.
  messages::commit_base own_commit;
};

using self_ptr = request_actor::stateful_pointer<request_state>;

live_summary summary_of(const request_state& st) {
  live_summary s;
  s.operation_id = st.op.operation_id;
  s.step = workflow::code_of(st.op.current);
  s.flow = std::string(workflow::to_string(st.op.order));
  s.version = st.op.version;
  s.mr_iid = st.op.mr_iid.value_or(0);
  s.repository = st.repository;
  s.mr_sha = st.op.mr_sha;
  s.next_wake_ms = st.op.wake_at_ms;
  s.polls = st.op.polls;
  s.merge_attempts = st.op.merge_attempts;
  s.spawned_ms = st.spawned_ms;
  s.step_entered_ms = st.op.step_entered_ms;
  s.busy = st.busy;
  s.last_note = st.last_note;
  s.last_error = st.last_error;
  return s;
}

void publish(self_ptr self) {
  self->state.svc->actors->update(summary_of(self->state));
}

void process(self_ptr self, const workflow::event& e);
void run_effects(self_ptr self, std::vector<workflow::effect> effects);

/// A job that never answered (it threw, or died unrun) is answered as a retryable failure of that
/// job, so the actor takes the path it takes for any failed read, write or call: a lost reload reads
/// the row again, a lost write retries under its version guard (which misses if the write had landed,
/// and then the row is read again), a lost call re-runs its step, which reads remote state first.
constexpr const char* lost_job_error =
    "the job ended without an answer (it threw or was dropped); see worker_pool.job_failed";

template <class Answer>
Answer lost_job(const std::string& operation_id, const char* job) {
  log::warn("request.job_lost", {{"operation_id", operation_id}, {"job", job}});
  Answer a;
  a.outcome = static_cast<int>(db_outcome::retryable);
  a.error = lost_job_error;
  return a;
}

void arm_timer(self_ptr self, std::int64_t delay_ms) {
  if (self->state.wake_now) {
    self->state.wake_now = false;
    delay_ms = 0;
  }
  self->state.resume_pending = false;  // this timer replaces the one that fired while busy
  auto gen = ++self->state.timer_generation;
  self->state.op.wake_at_ms = self->state.svc->now_ms() + delay_ms;
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(delay_ms, 0)), messages::wake{gen});
}

/// A poll's wait that follows a transition starts when the transition is handed to the database,
/// not when its commit answers: the timer runs while the write is in flight, so a short wait (the
/// first read of a pipeline after the MR opened) is not lengthened by the commit before it. A timer
/// that fires while the write is in flight is held (the wake handler defers while busy) and its step
/// runs once the write has committed, so no step ever runs before the write that precedes it. Longer
/// waits (an approval's deadline, which the actor may passivate for) are armed after the commit, by
/// run_effects: starting them early would gain nothing.
void start_wait_with_commit(self_ptr self, const workflow::settings& cfg, workflow::step to) {
  auto& st = self->state;
  if (st.after_commit.size() != 1 || st.after_commit.front().what != workflow::effect::kind::timer) return;
  const auto delay = st.after_commit.front().delay_ms;
  if (delay > cfg.polls.short_interval_ms) return;
  const auto now = st.svc->now_ms();
  if (passivated_wait(to, now + delay, now, st.svc->config->current()->durability().passivate_beyond_seconds)) return;
  st.after_commit.clear();
  arm_timer(self, delay);
  st.wait_generation = st.timer_generation;
}

void submit_reload(self_ptr self) {
  auto& st = self->state;
  st.busy = true;
  st.reload_pending = false;
  st.nudged.reset();
  auto handle = caf::actor_cast<request_actor>(self);
  auto id = st.op.operation_id;
  auto now_ms = st.svc->now_ms;
  auto owner = st.owner_instance;
  auto epoch = st.lease_epoch;
  auto project = st.repository;
  auto* svc = st.svc;
  auto guard =
      make_answer_guard([handle, id] { caf::anon_send(handle, lost_job<messages::row_loaded>(id, "reload")); });
  bool queued =
      st.svc->db->try_submit([handle, id, now_ms, owner, epoch, project, svc, guard](persistence::db_context& db) {
        messages::row_loaded out;
        auto r = persistence::load_operation(db, id);
        const auto ours = [&] {
          return r.ok() && r.value.owner_instance.value_or("") == owner && r.value.lease_epoch == epoch;
        };
        if (ours() && r.value.phase == workflow::phase::MERGED && r.value.deploy_reported && r.value.mr_iid) {
          // A deploy report came before MERGED was written, and the MERGED writer's check did not run:
          // its answer was lost after the COMMIT (it was told the row moved on), or it crashed right
          // after. Validate from the recorded report now, as that writer would have, and read the row
          // as the check left it; otherwise the change would wait for reconciliation's minimum age.
          auto validated =
              validate_if_already_deployed(db, id, *r.value.mr_iid, project, *svc->metrics, r.value.version);
          if (validated.ok()) {  // validated, or a failed deploy recorded: the row may have moved
            if (svc->row_written) svc->row_written(id);
            r = persistence::load_operation(db, id);
          }
        }
        out.outcome = static_cast<int>(r.outcome);
        if (r.ok() && !ours()) {
          // Another instance took the operation over (our lease expired while we were paused): this
          // actor must stop; reported as `preempted` so the actor can tell it from a plain reload.
          out.outcome = static_cast<int>(db_outcome::preempted);
          out.error = "operation owned by " + r.value.owner_instance.value_or("nobody") + " at lease epoch " +
                      std::to_string(r.value.lease_epoch);
        } else if (r.ok()) {
          out.step = workflow::code_of(r.value.step);
          out.version = r.value.version;
          out.mr_iid = r.value.mr_iid.value_or(0);
          out.mr_url = r.value.mr_url.value_or("");
          out.approval_id = r.value.approval_id.value_or("");
          out.age_ms = std::max<std::int64_t>(0, now_ms() - r.value.updated_at_ms);
          out.wake_at_ms = r.value.next_wake_at_ms.value_or(0);
        } else {
          out.error = r.error.message;
        }
        guard->answered();
        caf::anon_send(handle, std::move(out));
      });
  if (!queued) {
    guard->answered();
    st.busy = false;
    st.reload_pending = true;
    arm_timer(self, 500);
  }
}

void submit_persist(self_ptr self) {
  auto& st = self->state;
  st.busy = true;
  auto handle = caf::actor_cast<request_actor>(self);
  auto req = *st.pending_write;
  // The MERGED write brings its committed row back even when it commits alone: the row says
  // whether a deploy report came before it. (A group reads every row it moved anyway; any other
  // write alone does not: at low load a change moves several times between two polls, and a read per
  // write would cost more than the one query the next poll makes.)
  req.want_row = workflow::phase_of(req.to) == workflow::phase::MERGED;
  auto mr_iid = req.mr_iid ? req.mr_iid : st.op.mr_iid;
  auto project = st.repository;
  auto* svc = st.svc;
  auto guard = make_answer_guard(
      [handle, id = req.operation_id] { caf::anon_send(handle, lost_job<messages::persisted>(id, "persist")); });
  // After the transition committed (alone or in a group with other actors' transitions), on the
  // database thread that committed it.
  auto finish = [handle, req, mr_iid, project, svc, guard](persistence::db_context& db,
                                                           const persistence::db_result<std::int64_t>& r,
                                                           const persistence::operation_row* committed) {
    messages::persisted out;
    out.to_step = workflow::code_of(req.to);
    out.outcome = static_cast<int>(r.outcome);
    out.new_version = r.value;
    if (!r.ok()) {
      out.error = r.error.message;
    } else if (workflow::phase_of(req.to) == workflow::phase::MERGED && mr_iid &&
               deploy_check_needed(committed, r.value)) {
      // The deploy pipeline may call back before MERGED is written (it was answered
      // OUT_OF_ORDER, and marked the row): validate now instead of waiting for reconciliation's
      // min_age. The committed row says whether such a report came; without one, no check.
      // A validation (or a failed check) moved the row past `committed`: status readers re-read it.
      auto validated = validate_if_already_deployed(db, req.operation_id, *mr_iid, project, *svc->metrics, r.value);
      if (!validated.ok() || validated.value) committed = nullptr;
    }
    // After the validation above, so a status waiter that re-reads sees where the row ended up.
    if (r.ok() && committed && svc->row_written_as) {
      // A pair moved the row two versions on, from the version its first transition found.
      svc->row_written_as(*committed, req.before ? req.before->expected_version : 0);
    } else if (r.ok() && svc->row_written) {
      svc->row_written(req.operation_id);
    }
    guard->answered();
    caf::anon_send(handle, std::move(out));
  };
  bool queued = false;
  if (st.svc->transitions) {
    queued = st.svc->transitions->submit(req, std::move(finish));
  } else {
    queued = st.svc->db->try_submit([req, finish = std::move(finish)](persistence::db_context& db) {
      std::optional<persistence::operation_row> row;
      auto r = persistence::transition(db, req, req.want_row ? &row : nullptr);
      finish(db, r, row ? &*row : nullptr);
    });
  }
  if (!queued) {
    guard->answered();
    // The database queue is full: nothing can be written now, not even a failure state. Back off and
    // retry; the stored row still says exactly where the operation is.
    st.busy = false;
    st.svc->metrics->inc("changeflow_persist_rejected_total", "Transitions refused by a full database queue");
    arm_timer(self, std::min(5000, 100 << std::min(st.persist_failures++, 6)));
  }
}

void call_external(self_ptr self, const messages::call_request& req) {
  auto& st = self->state;
  auto snap = st.svc->config->current();
  // The approval system is told who asked for the change; rows from before the requester was
  // recorded name their subject, as they always did.
  effects::call_context ctx{st.op.operation_id,
                            st.op.subject_id,
                            st.op.title,
                            st.payload_json,
                            st.op.order == workflow::flow::create_then_approve,
                            st.op.mr_iid,
                            st.requester.empty() ? st.op.subject_id : st.requester,
                            st.repository,
                            st.target_branch};
  if (req.kind == messages::call_kind::try_merge) {
    ctx.own_commit = st.own_commit;
  }
  auto handle = caf::actor_cast<request_actor>(self);
  auto* metrics = st.svc->metrics;
  st.busy = true;
  auto guard = make_answer_guard([handle, kind = req.kind, id = st.op.operation_id] {
    log::warn("request.job_lost", {{"operation_id", id}, {"job", "external_call"}});
    messages::call_reply lost;
    lost.kind = kind;
    lost.outcome = messages::call_reply::status::retryable;
    lost.error = lost_job_error;
    caf::anon_send(handle, messages::external_reply{std::move(lost)});
  });
  auto run = st.svc->run_external;  // by value: a queued job must not depend on runtime::services outliving it
  bool queued =
      st.svc->external->try_submit([handle, req, ctx, snap, metrics, guard, run](clients::external_context& ext) {
        auto started = std::chrono::steady_clock::now();
        messages::call_reply reply;
        try {
          reply = run(ext, *snap, req, ctx);
        } catch (const std::exception& e) {
          reply.kind = req.kind;
          reply.outcome = messages::call_reply::status::retryable;
          reply.error = std::string("unexpected: ") + e.what();
        }
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        static const char* outcomes[] = {"ok", "retryable", "refused", "overloaded"};
        metrics->observe("changeflow_external_call_seconds", "External call latency by call and outcome",
                         {{"call", std::string(messages::to_string(req.kind))},
                          {"outcome", outcomes[static_cast<int>(reply.outcome)]}},
                         seconds);
        guard->answered();
        caf::anon_send(handle, messages::external_reply{std::move(reply)});
      });
  if (!queued) {
    guard->answered();
    st.busy = false;
    st.svc->metrics->inc("changeflow_external_rejected_total", "External calls refused by a full worker pool",
                         {{"call", std::string(messages::to_string(req.kind))}});
    messages::call_reply overloaded;
    overloaded.kind = req.kind;
    overloaded.outcome = messages::call_reply::status::overloaded;
    overloaded.error = "external worker pool full";
    process(self, workflow::reply{overloaded});
  }
}

/// The wait about to be armed is a passivated one (passivated_wait) and nothing else is pending: the
/// row holds everything (step, version, the deadline it committed or was read with), so the actor
/// stops instead of holding a timer for days.
bool passivates(self_ptr self) {
  auto& st = self->state;
  if (st.busy || st.pending_write || st.held || !st.after_commit.empty() || st.reload_pending || st.wake_now ||
      st.resume_pending || st.unrecorded_mr || !st.unrecorded_approval.empty())
    return false;
  if (!passivated_wait(st.op.current, st.op.wake_at_ms, st.svc->now_ms(),
                       st.svc->config->current()->durability().passivate_beyond_seconds))
    return false;
  log::debug("request.passivated", {{"operation_id", st.op.operation_id}, {"wake_at_ms", st.op.wake_at_ms}});
  st.svc->metrics->inc("changeflow_passivated_total", "Waits for the approval decision left without a live actor",
                       {{"when", "wait"}});
  return true;
}

/// Leaves the registry, then sends itself its last message. Whoever nudges it does so through the
/// registry under its lock (registry::send_if_present), so every nudge sent while it was registered
/// is in its mailbox before that last message, and none is dropped with the actor: the row it names
/// may have moved past the wait (a callback committed while this actor's own write was answered).
/// A nudge sent after it left finds no actor and starts one from the row, as for any passivated wait.
void retire(self_ptr self) {
  auto& st = self->state;
  st.retiring = true;
  const auto last = ++st.timer_generation;
  st.svc->actors->remove_if_is(st.op.operation_id, self->address());
  self->send(caf::actor_cast<request_actor>(self), messages::wake{last});
}

/// A nudge reached a retiring actor: it takes its place in the registry again and reads on. False
/// when another actor took the place meanwhile (started by a nudge that found none): that one reads
/// the row, and this one stops.
bool unretire(self_ptr self) {
  auto& st = self->state;
  st.retiring = false;
  ++st.timer_generation;  // its last message no longer stops it
  if (!st.svc->actors->put(st.op.operation_id, caf::actor_cast<caf::actor>(self), summary_of(st))) return false;
  st.svc->metrics->inc("changeflow_passivation_undone_total",
                       "Actors that were stopping for a passivated wait and read a nudge sent before they left");
  return true;
}

/// Starts the wait `delay_ms` long that follows a committed write: a timer, or, for a wait of days,
/// the actor stops (passivates). With a re-read pending the row may have moved on, so a wait of days
/// is left unarmed until the read ends (on_row_loaded). True when the actor is stopping.
bool start_wait(self_ptr self, std::int64_t delay_ms) {
  auto& st = self->state;
  st.wait_unarmed = false;
  if (passivates(self)) {
    retire(self);
    return true;
  }
  if (st.reload_pending && passivated_wait(st.op.current, st.op.wake_at_ms, st.svc->now_ms(),
                                           st.svc->config->current()->durability().passivate_beyond_seconds)) {
    ++st.timer_generation;  // no earlier timer stands in for it
    st.wait_unarmed = true;
    return false;
  }
  arm_timer(self, delay_ms);
  return false;
}

void run_effects(self_ptr self, std::vector<workflow::effect> effects) {
  for (const auto& e : effects) {
    switch (e.what) {
      case workflow::effect::kind::call: call_external(self, e.call); break;
      case workflow::effect::kind::timer:
        if (start_wait(self, e.delay_ms)) return;
        break;
      case workflow::effect::kind::stop:
        publish(self);
        self->quit();
        return;
    }
  }
  publish(self);
}

/// Enters `req.to` in memory without writing it (transition_out::with_next) and runs that step's
/// work: the next write carries it as its `before`. The row, and every reader of it, still shows
/// the step before until then; a crash loses only the step's work, which is safe to repeat.
void hold_step(self_ptr self, persistence::transition_request req) {
  auto& st = self->state;
  st.op.current = req.to;
  st.op.step_entered_ms = st.svc->now_ms();
  st.op.polls = 0;
  if (req.clear_wake) st.op.wake_at_ms = 0;
  if (req.mr_iid) st.op.mr_iid = req.mr_iid;
  if (req.mr_url) st.op.mr_url = *req.mr_url;
  if (req.approval_id) st.op.approval_id = *req.approval_id;
  st.held = std::make_shared<const persistence::transition_request>(std::move(req));
  process(self, workflow::resume{});
}

void process(self_ptr self, const workflow::event& e) {
  auto& st = self->state;
  auto cfg = runtime::workflow_settings_from(*st.svc->config->current(), st.repository);
  workflow::decision d;
  try {
    d = workflow::decide(st.op, e, cfg, st.svc->now_ms());
  } catch (const std::exception& ex) {
    // The core does not throw; if it ever does, the operation must still leave an explanation.
    log::error("request.decide_threw", {{"operation_id", st.op.operation_id}, {"error", ex.what()}});
    st.last_error = ex.what();
    arm_timer(self, 5000);
    return;
  }
  // A reply either hands its MR read on to the next step or drops the one kept.
  if (std::holds_alternative<workflow::reply>(e)) st.op.last_read = d.keep_read.value_or(messages::mr_read{});
  if (!d.note.empty()) st.last_note = d.note;
  if (d.refused) {
    log::debug("request.event_refused",
               {{"operation_id", st.op.operation_id}, {"step", workflow::to_string(st.op.current)}, {"note", d.note}});
    publish(self);
    return;
  }
  if (d.sha_seen && !d.sha_seen->empty()) st.op.mr_sha = *d.sha_seen;
  if (d.count_poll) ++st.op.polls;
  if (d.count_merge_attempt) ++st.op.merge_attempts;
  if (!d.next && !d.failed) {
    run_effects(self, std::move(d.effects));
    return;
  }
  persistence::transition_request req;
  // The step held in memory goes first, in the same commit; this write then expects the row where
  // that one leaves it.
  const std::int64_t expected = st.op.version + (st.held ? 1 : 0);
  req.before = std::exchange(st.held, nullptr);
  if (!d.next) {
    // A failed call retried in the same step: the attempt, its error and the next try are written
    // (guarded like a transition) before the retry timer runs, so they outlive this actor.
    req.operation_id = st.op.operation_id;
    req.expected_version = expected;
    req.from = req.to = st.op.current;
    req.retry_in_step = true;
    req.last_error = d.failed->error;
    req.last_error_status = d.failed->http_status;
    req.fence = persistence::owner_fence{st.owner_instance, st.lease_epoch};
    for (const auto& e : d.effects) {
      if (e.what == workflow::effect::kind::timer) req.wake_in_ms = e.delay_ms;
    }
    st.pending_write = std::make_unique<persistence::transition_request>(std::move(req));
    st.after_commit = std::move(d.effects);
    submit_persist(self);
    return;
  }
  req.operation_id = st.op.operation_id;
  req.expected_version = expected;
  req.from = st.op.current;
  req.to = d.next->to;
  req.cause = d.next->cause;
  req.actor = "workflow";
  req.instance_id = st.svc->instance_id;
  req.fence = persistence::owner_fence{st.owner_instance, st.lease_epoch};
  if (d.next->mr_iid) req.mr_iid = d.next->mr_iid;
  if (!d.next->mr_url.empty()) req.mr_url = d.next->mr_url;
  if (!d.next->approval_id.empty()) req.approval_id = d.next->approval_id;
  req.wake_in_ms = d.next->wake_in_ms;
  req.clear_wake = d.next->clear_wake || !d.next->wake_in_ms;
  if (!d.next->last_error.empty()) req.last_error = d.next->last_error;
  if (d.failed) {
    // The call that ended this step failed: counted for the step left, with its status and time.
    req.failed_attempt = true;
    req.last_error_status = d.failed->http_status;
    if (!req.last_error) req.last_error = d.failed->error;
  }
  if (d.next->with_next && !req.before && d.effects.empty()) {
    // Held in memory and written with the next step (transition_out::with_next): the step's own
    // work runs now.
    hold_step(self, std::move(req));
    return;
  }
  st.pending_write = std::make_unique<persistence::transition_request>(std::move(req));
  st.after_commit = std::move(d.effects);
  start_wait_with_commit(self, cfg, d.next->to);
  submit_persist(self);
}

/// The step a pair's first transition wrote, counted and logged as the actor's own commit.
void count_passed_step(self_ptr self, const persistence::transition_request& w, std::int64_t version) {
  auto& st = self->state;
  if (!w.before) return;
  count_committed_transition(*st.svc->metrics, w.before->to);
  log::info("request.transition", {{"operation_id", st.op.operation_id},
                                   {"from", workflow::to_string(w.before->from)},
                                   {"to", workflow::to_string(w.before->to)},
                                   {"version", version - 1},
                                   {"cause", w.before->cause}});
}

void on_persisted(self_ptr self, const messages::persisted& p) {
  auto& st = self->state;
  st.busy = false;
  auto outcome = static_cast<db_outcome>(p.outcome);
  if (outcome == db_outcome::ok && st.pending_write && st.pending_write->retry_in_step) {
    count_passed_step(self, *st.pending_write, p.new_version);
    st.op.version = p.new_version;
    if (st.pending_write->last_error) st.last_error = *st.pending_write->last_error;
    st.pending_write.reset();
    st.persist_failures = 0;
    auto effects = std::move(st.after_commit);
    st.after_commit.clear();
    run_effects(self, std::move(effects));
    return;
  }
  if (outcome == db_outcome::ok && st.pending_write) {
    // Moved out before the reset below: `w` is still read afterwards (metrics, log line).
    const auto w = std::move(*st.pending_write);
    auto from = st.op.current;
    st.op.current = w.to;
    st.op.version = p.new_version;
    st.op.step_entered_ms = st.svc->now_ms();
    st.op.polls = 0;
    if (w.to == step::HANDLE_STARTED || from == step::CREATE_SUCCEEDED) st.op.merge_attempts = 0;  // handling begins
    if (w.mr_iid) st.op.mr_iid = w.mr_iid;
    if (w.mr_url) st.op.mr_url = *w.mr_url;
    if (w.approval_id) st.op.approval_id = *w.approval_id;
    if (w.last_error) st.last_error = *w.last_error;
    // A wait started with the write keeps the wake-up its timer was armed for.
    const auto wait = std::exchange(st.wait_generation, 0);
    const bool waiting = wait != 0 && wait == st.timer_generation;
    if (!waiting) st.op.wake_at_ms = w.wake_in_ms ? st.svc->now_ms() + *w.wake_in_ms : 0;
    st.pending_write.reset();
    st.persist_failures = 0;
    // Business-outcome metrics only after commit, and only for the flips this actor made.
    count_passed_step(self, w, p.new_version);
    count_committed_transition(*st.svc->metrics, w.to);
    if (workflow::phase_of(w.to) != workflow::phase_of(from) && workflow::is_terminal(workflow::phase_of(w.to))) {
      st.svc->metrics->inc("changeflow_operations_finished_total", "Operations that reached a terminal phase",
                           {{"phase", std::string(workflow::to_string(workflow::phase_of(w.to)))},
                            {"step", std::string(workflow::to_string(w.to))}});
    }
    log::info("request.transition", {{"operation_id", st.op.operation_id},
                                     {"from", workflow::to_string(from)},
                                     {"to", workflow::to_string(w.to)},
                                     {"version", st.op.version},
                                     {"cause", w.cause}});
    // The wait's timer runs since the write was handed over. It fired meanwhile (held while the
    // write was in flight), or a webhook ended the wait: the step runs now, and a timer still
    // pending is ignored. Otherwise it runs when the timer fires. A timer replaced meanwhile (a
    // backoff while the database queue refused the write) leaves the step to run now, below.
    if (waiting) {
      if (std::exchange(st.resume_pending, false) || std::exchange(st.wake_now, false)) {
        ++st.timer_generation;
        process(self, workflow::resume{});
      } else {
        publish(self);
      }
      return;
    }
    auto effects = std::move(st.after_commit);
    st.after_commit.clear();
    if (effects.empty()) {
      if (!workflow::needs_actor(st.op.current)) {
        run_effects(self, {workflow::effect{workflow::effect::kind::stop}});
      } else {
        process(self, workflow::resume{});
      }
      return;
    }
    run_effects(self, std::move(effects));
    return;
  }
  // A write retried later keeps the effects that follow it (a retry's wait among them); a write
  // that is dropped takes them with it.
  if (outcome != db_outcome::retryable) st.after_commit.clear();
  if (std::exchange(st.wait_generation, 0) != 0) {
    // The wait belonged to the write that did not land: its timer is void, and each path below
    // decides when the step runs next.
    ++st.timer_generation;
    st.resume_pending = false;
  }
  switch (outcome) {
    case db_outcome::preempted:
    case db_outcome::not_found:
      // Someone else wrote the row (a callback, an operator, another instance): re-read and re-decide.
      st.svc->metrics->inc("changeflow_guard_misses_total", "Guarded writes that matched no row");
      if (st.pending_write) {
        if (st.pending_write->mr_iid && st.pending_write->mr_iid != st.op.mr_iid)
          st.unrecorded_mr = st.pending_write->mr_iid;
        if (st.pending_write->approval_id && *st.pending_write->approval_id != st.op.approval_id) {
          st.unrecorded_approval = *st.pending_write->approval_id;
        }
      }
      st.pending_write.reset();
      st.reload_must_resume = true;
      submit_reload(self);
      return;
    case db_outcome::retryable:
      st.last_error = p.error;
      arm_timer(self, std::min(5000, 100 << std::min(st.persist_failures++, 6)));
      publish(self);
      return;
    default:
      log::error(
          "request.persist_failed",
          {{"operation_id", st.op.operation_id}, {"error", p.error}, {"outcome", persistence::to_string(outcome)}});
      st.last_error = p.error;
      st.pending_write.reset();
      arm_timer(self, 5000);
      st.reload_pending = true;
      st.reload_must_resume = true;
      publish(self);
      return;
  }
}

/// The change was cancelled or closed while this actor's call was creating something remotely (an
/// MR, an approval request) that the cancel could not see: withdraw it now, best effort, logged. The
/// row already says CANCELLED/CLOSED; this only keeps the remote systems tidy.
void withdraw_unrecorded(self_ptr self) {
  auto& st = self->state;
  if (!st.unrecorded_mr && st.unrecorded_approval.empty()) return;
  auto snap = st.svc->config->current();
  auto id = st.op.operation_id;
  // Whatever the row recorded after all was seen (and withdrawn) by the cancel itself.
  auto mr = st.unrecorded_mr != st.op.mr_iid ? st.unrecorded_mr : std::nullopt;
  auto approval = st.unrecorded_approval != st.op.approval_id ? st.unrecorded_approval : std::string();
  if (!mr && approval.empty()) return;
  bool queued =
      st.svc->external->try_submit([snap, id, mr, approval, project = st.repository](clients::external_context& ec) {
        try {
          ec.refresh(*snap);
          if (!approval.empty()) {
            auto w = ec.approval.withdraw(approval);
            log::info("request.withdrew_unrecorded_approval",
                      {{"operation_id", id}, {"approval_id", approval}, {"ok", static_cast<bool>(w)}});
          }
          if (mr) {
            auto repo = ec.repository(*snap, project);
            auto c = repo.gitlab.close_mr(repo.author_token, *mr);
            log::info("request.closed_unrecorded_mr",
                      {{"operation_id", id}, {"mr_iid", *mr}, {"ok", static_cast<bool>(c)}});
          }
        } catch (const std::exception& e) {
          log::warn("request.withdraw_unrecorded_failed", {{"operation_id", id}, {"error", e.what()}});
        }
      });
  if (!queued)
    log::warn("request.withdraw_unrecorded_dropped", {{"operation_id", id}, {"reason", "external pool full"}});
}

void on_row_loaded(self_ptr self, const messages::row_loaded& r);

/// The row's stored wake-up (0: none) as the actor's own. For the approval wait the stored deadline
/// is authoritative: updated_at (the step's entry as read) moves on a takeover, and the wait must
/// not grow with every change of owner.
void take_stored_wake(request_state& st, std::int64_t wake_at_ms) {
  st.op.wake_at_ms = wake_at_ms;
  if (st.op.current == step::APPROVAL_SENT && wake_at_ms > 0) {
    st.op.step_entered_ms = wake_at_ms - runtime::workflow_settings_from(*st.svc->config->current()).approval_wait_ms;
  }
}

/// The version the nudge's writer found: as it says, or the one before the version it wrote.
std::int64_t found_by(const messages::row_changed& c) {
  return c.from_version != 0 ? c.from_version : c.version - 1;
}

/// Another writer moved only the step, from the version this actor holds, and said what it wrote:
/// what a read would return, without the read (mr, approval id and ownership are as this actor
/// knows them; a lost lease still shows at the next fenced write).
void take_known_write(self_ptr self, int step_code, std::int64_t version) {
  messages::row_loaded known;
  known.outcome = static_cast<int>(db_outcome::ok);
  known.step = step_code;
  known.version = version;
  on_row_loaded(self, known);
}

/// The job in flight has ended and a nudge came meanwhile: when that nudge was the only one, named
/// its write, and this actor (its own write included) holds the version just before it, the nudge
/// is taken as read; otherwise the row is read again.
void reload_or_take_nudge(self_ptr self) {
  auto& st = self->state;
  auto nudged = std::exchange(st.nudged, std::nullopt);
  if (nudged && !st.reload_must_resume && !st.pending_write && found_by(*nudged) == st.op.version) {
    st.reload_pending = false;
    st.svc->metrics->inc("changeflow_nudges_taken_total", "Nudges an actor took as read instead of reading its row");
    take_known_write(self, nudged->step, nudged->version);
    return;
  }
  submit_reload(self);
}

void on_row_loaded(self_ptr self, const messages::row_loaded& r) {
  auto& st = self->state;
  st.busy = false;
  auto outcome = static_cast<db_outcome>(r.outcome);
  if (outcome != db_outcome::ok) {
    if (outcome == db_outcome::not_found) {
      log::error("request.row_missing", {{"operation_id", st.op.operation_id}});
      self->quit();
      return;
    }
    if (outcome == db_outcome::preempted) {
      log::warn("request.ownership_lost", {{"operation_id", st.op.operation_id}, {"reason", r.error}});
      st.svc->metrics->inc("changeflow_ownership_lost_total", "Actors stopped because another instance owns the row");
      self->quit();
      return;
    }
    st.reload_pending = true;
    arm_timer(self, 1000);
    return;
  }
  auto s = workflow::step_from_code(r.step);
  if (!s) {
    log::error("request.unknown_step", {{"operation_id", st.op.operation_id}, {"step", r.step}});
    self->quit();
    return;
  }
  bool moved = *s != st.op.current;
  bool resume = std::exchange(st.reload_must_resume, false) || std::exchange(st.resume_pending, false);
  if (!moved && r.version == st.op.version && !resume && st.op.wake_at_ms > st.svc->now_ms()) {
    // The row is as this actor last wrote or read it (a nudge raced its own commit, e.g. the owner's
    // changed-row poll read the new version before the commit's answer arrived): the wait it armed
    // stands. Re-running the step now would cut a retry short of its back-off or Retry-After. A wait
    // of days that this read held back (start_wait) starts now: the actor passivates.
    if (st.wait_unarmed && start_wait(self, st.op.wake_at_ms - st.svc->now_ms())) return;
    publish(self);
    return;
  }
  // Someone else wrote the row, or this actor's view was ahead of it (a step held in memory, a
  // write waiting to be retried): the step the row names runs again from the row and decides
  // afresh, so nothing decided on the older view is written or run after it.
  st.held.reset();
  st.pending_write.reset();
  st.after_commit.clear();
  if (std::exchange(st.wait_generation, 0) != 0) ++st.timer_generation;
  st.wait_unarmed = false;  // the step re-decides its wait
  st.op.last_read = {};
  st.op.current = *s;
  st.op.version = r.version;
  if (r.mr_iid) st.op.mr_iid = r.mr_iid;
  if (!r.mr_url.empty()) st.op.mr_url = r.mr_url;
  if (!r.approval_id.empty()) st.op.approval_id = r.approval_id;
  if (moved) {
    st.op.step_entered_ms = st.svc->now_ms() - r.age_ms;
    st.op.polls = 0;
  }
  // The row's stored deadline, as at spawn: a wait of days found by the read is passivated like one
  // this actor stored itself (its timer effect stops the actor instead of arming for days).
  if (r.wake_at_ms >= 0) take_stored_wake(st, r.wake_at_ms);
  if (st.op.current == step::CANCELLED || st.op.current == step::CLOSE_SUCCEEDED) withdraw_unrecorded(self);
  st.unrecorded_mr.reset();
  st.unrecorded_approval.clear();
  if (!workflow::needs_actor(st.op.current)) {
    run_effects(self, {workflow::effect{workflow::effect::kind::stop}});
    return;
  }
  process(self, workflow::resume{});
}

std::string describe(const request_state& st, std::size_t mailbox) {
  nlohmann::json j = {
      {"operationId", st.op.operation_id},
      {"step", workflow::to_string(st.op.current)},
      {"stepCode", workflow::code_of(st.op.current)},
      {"phase", workflow::to_string(workflow::phase_of(st.op.current))},
      {"flow", workflow::to_string(st.op.order)},
      {"version", st.op.version},
      {"mrIid", st.op.mr_iid ? nlohmann::json(*st.op.mr_iid) : nlohmann::json(nullptr)},
      {"mrSha", st.op.mr_sha},
      {"polls", st.op.polls},
      {"mergeAttempts", st.op.merge_attempts},
      {"nextWakeMs", st.op.wake_at_ms},
      {"stepEnteredMs", st.op.step_entered_ms},
      {"spawnedMs", st.spawned_ms},
      {"busy", st.busy},
      {"heldStep", st.held ? nlohmann::json(workflow::to_string(st.held->to)) : nlohmann::json(nullptr)},
      {"mailbox", mailbox},
      {"lastNote", st.last_note},
      {"lastError", st.last_error}};
  return log::safe_dump(j);
}

request_actor::behavior_type request_actor_impl(self_ptr self, runtime::services* svc, request_seed seed) {
  auto& st = self->state;
  st.svc = svc;
  st.op = std::move(seed.op);
  st.payload_json = std::move(seed.payload_json);
  st.requester = std::move(seed.requester);
  st.repository = std::move(seed.repository);
  st.target_branch = std::move(seed.target_branch);
  st.owner_instance = seed.owner_instance.empty() ? svc->instance_id : seed.owner_instance;
  st.lease_epoch = seed.lease_epoch;
  // The first wake reads the row, then runs the step it names (the wake handler's owed read).
  st.reload_pending = seed.read_first;
  st.spawned_ms = svc->now_ms();
  take_stored_wake(st, st.op.wake_at_ms);
  auto id = st.op.operation_id;
  self->set_exception_handler([id](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      log::error("request.actor_threw", {{"operation_id", id}, {"error", e.what()}});
    } catch (...) {
    }
    // The row still says where the operation stopped; rehydration or an operator resumes it.
    return caf::make_error(caf::sec::runtime_error);
  });
  return {
      [self](const messages::wake& w) {
        auto& s = self->state;
        if (s.retiring) {
          if (w.generation == s.timer_generation) self->quit();  // its last message: nothing came before it
          return;
        }
        if (w.generation != 0 && w.generation != s.timer_generation) return;  // replaced timer
        if (s.busy) {
          s.resume_pending = true;
          return;
        }
        if (s.pending_write) return submit_persist(self);
        if (s.reload_pending) {
          s.resume_pending = true;  // the step this timer was for runs once the row is read
          return submit_reload(self);
        }
        process(self, workflow::resume{});
      },
      [self](const messages::external_reply& r) {
        self->state.busy = false;
        if (r.reply.kind == messages::call_kind::create_mr && r.reply.outcome == messages::call_reply::status::ok) {
          self->state.own_commit = r.reply.own_commit;
        }
        process(self, workflow::reply{r.reply});
        auto& s = self->state;
        if (!s.busy && s.reload_pending) reload_or_take_nudge(self);
      },
      [self](const messages::persisted& p) {
        on_persisted(self, p);
        auto& s = self->state;
        if (!s.busy && s.reload_pending) reload_or_take_nudge(self);
      },
      [self](const messages::row_loaded& r) {
        on_row_loaded(self, r);
        // A nudge that came during this read may be for a write made after it: read once more.
        auto& s = self->state;
        if (!s.busy && s.reload_pending && static_cast<db_outcome>(r.outcome) == db_outcome::ok) submit_reload(self);
      },
      [self](const messages::row_changed& changed) {
        auto& s = self->state;
        if (s.retiring && !unretire(self)) {
          self->quit();
          return;
        }
        if (s.busy) {
          // Only a first nudge that names its write can stand in for the read the job's end makes.
          if (!s.reload_pending && changed.version != 0) {
            s.nudged = changed;
          } else {
            s.nudged.reset();
          }
          s.reload_pending = true;
          return;
        }
        if (changed.version != 0 && found_by(changed) == s.op.version && !s.pending_write) {
          take_known_write(self, changed.step, changed.version);
          return;
        }
        submit_reload(self);
      },
      [self](const messages::gitlab_event& e) {
        auto& s = self->state;
        if (s.retiring) return;  // a passivated wait waits for no pipeline
        if (workflow::outdates(s.op.last_read, e)) s.op.last_read = {};
        if (!workflow::ends_wait(s.op.current, s.op.mr_sha, e)) return;
        s.svc->metrics->inc("changeflow_webhook_wakes_total", "Waits a GitLab webhook ended before their poll");
        if (s.busy || s.pending_write) {
          // A read or write is under way; its answer decides and arms the next wait, which then
          // fires at once.
          s.wake_now = true;
          return;
        }
        if (s.reload_pending) {
          // A read is owed (a rehydrated actor's first, or a retry of a failed one): it runs now,
          // and the step the row names right after it, instead of at the wait's next wake-up.
          ++s.timer_generation;
          s.resume_pending = true;
          s.last_note = "GitLab webhook: reading the row, then the MR";
          return submit_reload(self);
        }
        // The webhook makes the next wake "now": the timer of the wait it replaces is ignored.
        ++s.timer_generation;
        s.last_note = "GitLab webhook: reading the MR now";
        process(self, workflow::resume{});
      },
      [self](const messages::inspect_request&) {
        return messages::actor_snapshot{describe(self->state, self->mailbox().count())};
      },
  };
}

}  // namespace

void count_committed_transition(metrics::registry& m, workflow::step to) {
  m.inc("changeflow_transitions_total", "Committed workflow transitions",
        {{"to_phase", std::string(workflow::to_string(workflow::phase_of(to)))}});
}

request_seed seed_from_row(const persistence::operation_row& row, std::int64_t now_ms) {
  request_seed seed;
  auto& op = seed.op;
  op.operation_id = row.operation_id;
  op.subject_id = row.subject_id;
  op.target_key = row.target_key;
  op.title = row.title;
  op.order = workflow::parse_flow(row.flow).value_or(workflow::flow::approve_then_create);
  op.current = row.step;
  op.version = row.version;
  op.mr_iid = row.mr_iid;
  op.mr_url = row.mr_url.value_or("");
  op.approval_id = row.approval_id.value_or("");
  op.step_entered_ms = row.updated_at_ms ? row.updated_at_ms : now_ms;
  op.wake_at_ms = row.next_wake_at_ms.value_or(0);
  seed.payload_json = row.payload_json;
  seed.requester = row.requester;
  seed.repository = row.repository;
  seed.target_branch = row.target_branch;
  seed.owner_instance = row.owner_instance.value_or("");
  seed.lease_epoch = row.lease_epoch;
  return seed;
}

namespace {
bool is_timed_wait(workflow::step s) {
  using workflow::step;
  switch (s) {
    case step::APPROVAL_SENT:
    case step::CREATE_MR_OPENED:
    case step::CREATE_PIPELINE_PENDING:
    case step::HANDLE_MERGING:
    case step::HANDLE_PIPELINE_PENDING:
    case step::REBASE_PENDING: return true;
    default: return false;
  }
}
}  // namespace

bool passivated_wait(workflow::step s, std::int64_t wake_at_ms, std::int64_t now_ms, std::int64_t beyond_seconds) {
  return s == workflow::step::APPROVAL_SENT && beyond_seconds > 0 && wake_at_ms > 0 &&
         wake_at_ms - now_ms > beyond_seconds * 1000;
}

std::optional<request_actor> spawn_request_actor(runtime::services& svc, request_seed seed) {
  auto id = seed.op.operation_id;
  if (passivated_wait(seed.op.current, seed.op.wake_at_ms, svc.now_ms(),
                      svc.config->current()->durability().passivate_beyond_seconds)) {
    svc.metrics->inc("changeflow_passivated_total", "Waits for the approval decision left without a live actor",
                     {{"when", "spawn"}});
    return std::nullopt;
  }
  if (!seed.owner_instance.empty() && seed.owner_instance != svc.instance_id) {
    // Another instance owns the row: it drives the operation (it sees the change through its
    // changed-row poll); a second actor here would be a second writer.
    log::debug("request.not_owner", {{"operation_id", id}, {"owner", seed.owner_instance}});
    return std::nullopt;
  }
  if (svc.actors->find(id)) return std::nullopt;
  // Durable timer: a waiting step resumes at its stored deadline, not at once, so a restart or a
  // takeover does not poll every waiting operation immediately. Overdue deadlines fire now.
  std::int64_t first_wake_in_ms = 0;
  if (is_timed_wait(seed.op.current) && seed.op.wake_at_ms > 0) {
    first_wake_in_ms = std::max<std::int64_t>(0, seed.op.wake_at_ms - svc.now_ms());
  }
  live_summary summary;
  summary.operation_id = id;
  summary.step = workflow::code_of(seed.op.current);
  summary.spawned_ms = svc.now_ms();
  // Spawned lazily so the registry entry exists before the actor's first message can remove it.
  auto handle = svc.system->spawn<caf::lazy_init>(request_actor_impl, &svc, std::move(seed));
  if (!svc.actors->put(id, caf::actor_cast<caf::actor>(handle), summary)) {
    caf::anon_send_exit(handle, caf::exit_reason::user_shutdown);
    return std::nullopt;
  }
  // Attached from outside rather than in the behavior: a lazily initialised actor that is told to
  // exit before its first message (a waiting step at shutdown) must still leave the registry, which
  // is what a graceful stop waits for.
  auto* reg = svc.actors;
  // Only its own entry: a retired actor's place may have been taken by then (retire, unretire).
  caf::actor_cast<caf::abstract_actor*>(handle)->attach_functor(
      [reg, id, addr = handle.address()] { reg->remove_if_is(id, addr); });
  // Resume: re-run the step the stored row names (every step reads remote state before acting).
  if (first_wake_in_ms > 0) {
    caf::delayed_anon_send(handle, std::chrono::milliseconds(first_wake_in_ms), messages::wake{0});
  } else {
    caf::anon_send(handle, messages::wake{0});
  }
  return handle;
}

}  // namespace changeflow::actors
