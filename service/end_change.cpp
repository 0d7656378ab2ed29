#include "service/end_change.hpp"

#include "base/log.hpp"
#include "persistence/operation_repo.hpp"
#include "service/wake_actor.hpp"

#include <memory>

namespace changeflow::service {

namespace {

using persistence::db_outcome;
using workflow::phase;
using workflow::step;

/// A guarded write that lost to another writer re-reads and decides again; a row that keeps moving
/// for this many rounds is reported as stale instead of being chased for ever.
constexpr int max_rounds = 3;

step target_of(end_kind k) {
  return k == end_kind::cancel ? step::CANCELLED : step::CLOSE_SUCCEEDED;
}
std::string_view verb(end_kind k) {
  return k == end_kind::cancel ? "cancel" : "close";
}
std::string_view ended_word(end_kind k) {
  return k == end_kind::cancel ? "Cancelled" : "Closed";
}

struct run_state {
  runtime::services* svc = nullptr;
  end_request req;
  std::function<void(end_result)> done;
  int round = 0;
  // What earlier rounds withdrew stays withdrawn, and is reported even when the write that follows
  // lands only in a later round (a round that lost its write re-reads and finds the MR closed).
  std::vector<std::string> withdrawn;
};
using run_ptr = std::shared_ptr<run_state>;

void start_round(run_ptr run);

void finish(const run_ptr& run, end_result r) {
  if (!r.detail.empty()) {
    log::warn(
        "change.end_failed",
        {{"operation_id", run->req.operation_id}, {"action", std::string(verb(run->req.kind))}, {"detail", r.detail}});
  }
  run->done(std::move(r));
}

end_result status_only(end_status s, std::string message, std::string detail = {}) {
  end_result r;
  r.status = s;
  r.message = std::move(message);
  r.detail = std::move(detail);
  return r;
}

void withdraw_approval_after(run_ptr run, persistence::operation_row row, end_result out);

/// The guarded write of the planned step, on a database worker.
void write_end(run_ptr run, persistence::operation_row row, step target, end_plan plan) {
  auto* svc = run->svc;
  bool queued = svc->db->try_submit([run, row, target, plan](persistence::db_context& db) {
    const auto& withdrawn = run->withdrawn;
    persistence::transition_request t;
    t.operation_id = row.operation_id;
    t.expected_version = row.version;
    t.from = row.step;
    t.to = target;
    t.by = run->req.by;
    std::string cause = target == step::HANDLE_ALREADY_MERGED
                            ? std::string(verb(run->req.kind)) + " found the MR merged (merged wins)"
                            : (run->req.kind == end_kind::cancel ? "cancelled by " : "closed by ") + run->req.actor;
    for (const auto& w : withdrawn) cause += "; " + w;
    if (plan.withdraw_approval && target != step::HANDLE_ALREADY_MERGED) cause += "; withdrawing the approval request";
    if (!run->req.reason.empty()) cause += ": " + run->req.reason;
    t.cause = cause.substr(0, 250);
    t.actor = run->req.actor.substr(0, 160);
    t.instance_id = run->svc->instance_id;
    t.clear_wake = true;
    if (!run->req.reason.empty() && target != step::HANDLE_ALREADY_MERGED) {
      t.last_error = std::string(verb(run->req.kind)) + ": " + run->req.reason;
    }
    auto r = persistence::transition(db, t);
    if (r.outcome == db_outcome::preempted || r.outcome == db_outcome::illegal_transition) {
      // Someone else moved the row between our read and our write (a callback, the actor, a
      // merge): decide again from what is there now. What we withdrew stays withdrawn.
      // A caller that pinned the version it saw asked for exactly that state: no second round.
      if (!run->req.expected_version && ++run->round < max_rounds) return start_round(run);
      return finish(run, status_only(end_status::stale,
                                     "The change kept moving while you acted; reload it and "
                                     "try again"));
    }
    if (!r.ok()) return finish(run, status_only(end_status::unavailable, {}, "database: " + r.error.message));
    auto woke = wake_actor(db, *run->svc, row.operation_id, target, t.cause);
    end_result out;
    out.status = target == step::HANDLE_ALREADY_MERGED ? end_status::merged_wins : end_status::ended;
    out.from = row.step;
    out.to = target;
    out.version = r.value;
    out.written = true;
    out.withdrawn = withdrawn;
    out.message = target == step::HANDLE_ALREADY_MERGED
                      ? "The merge request had already merged: merged wins, the change goes on to deployment"
                      : std::string(ended_word(run->req.kind));
    log::info("change.ended", {{"operation_id", row.operation_id},
                               {"from", workflow::to_string(row.step)},
                               {"to", workflow::to_string(target)},
                               {"actor", run->req.actor},
                               {"wake", woke}});
    if (plan.withdraw_approval && target != step::HANDLE_ALREADY_MERGED) {
      return withdraw_approval_after(run, row, std::move(out));
    }
    finish(run, std::move(out));
  });
  if (!queued) finish(run, status_only(end_status::overloaded, {}));
}

/// The MR is read (and closed) before the write: a merge that landed first must win, which only a read
/// can tell. Runs on an external worker, then hands over to write_end.
void close_mr_first(run_ptr run, persistence::operation_row row, end_plan plan) {
  auto* svc = run->svc;
  auto snap = svc->config->current();
  bool queued = svc->external->try_submit([run, row, plan, snap](clients::external_context& ec) {
    step target = *plan.target;
    try {
      ec.refresh(*snap);
      auto iid = *row.mr_iid;
      // The MR lives in the change's own repository, reached with that repository's token.
      auto repo = ec.repository(*snap, row.repository);
      auto mr = repo.gitlab.get_mr(repo.author_token, iid, false);
      if (!mr) {
        return finish(run,
                      status_only(end_status::unavailable, "The merge request could not be read; try again shortly",
                                  "read MR: " + clients::describe(mr.error())));
      }
      if (mr->state == "merged") {
        if (!workflow::is_allowed(row.step, step::HANDLE_ALREADY_MERGED, run->req.by)) {
          return finish(run, status_only(end_status::merged_wins, "The merge request has already merged: merged wins"));
        }
        target = step::HANDLE_ALREADY_MERGED;
      } else if (mr->state == "opened" || mr->state == "locked") {
        auto closed = repo.gitlab.close_mr(repo.author_token, iid);
        if (!closed) {
          return finish(run,
                        status_only(end_status::unavailable, "The merge request could not be closed; try again shortly",
                                    "close MR: " + clients::describe(closed.error())));
        }
        if (closed->state == "merged") {
          target = step::HANDLE_ALREADY_MERGED;  // a merge landed just before the close
        } else {
          run->withdrawn.push_back("MR !" + std::to_string(iid) + " closed");
        }
      }
    } catch (const std::exception& e) {
      return finish(run, status_only(end_status::unavailable, {}, std::string("close MR threw: ") + e.what()));
    }
    write_end(run, row, target, plan);
  });
  if (!queued) finish(run, status_only(end_status::overloaded, {}));
}

/// After the ended step is committed: withdraw the approval request that may still be pending. Done
/// after the write because the approval system answers a withdrawal with a WITHDRAWN callback, which
/// must find the change already ended (it is then stale) instead of racing the write. A failure here
/// leaves a request pending there, never a change in the wrong state: it is logged and reported.
void withdraw_approval_after(run_ptr run, persistence::operation_row row, end_result out) {
  auto* svc = run->svc;
  auto snap = svc->config->current();
  bool queued = svc->external->try_submit([run, row, snap, out](clients::external_context& ec) mutable {
    try {
      ec.refresh(*snap);
      auto w = ec.approval.withdraw(*row.approval_id);
      if (w) {
        out.withdrawn.push_back("approval request withdrawn");
      } else if (w.error().what != clients::call_error::kind::http_status ||
                 (w.error().status != 409 && w.error().status != 404)) {
        // 409/404: already decided or unknown there, nothing to withdraw. Anything else: left pending.
        out.withdrawn.push_back("approval request NOT withdrawn (" + clients::describe(w.error()) + ")");
        log::warn("change.withdraw_failed",
                  {{"operation_id", row.operation_id}, {"error", clients::describe(w.error())}});
      }
    } catch (const std::exception& e) {
      log::warn("change.withdraw_failed", {{"operation_id", row.operation_id}, {"error", e.what()}});
    }
    finish(run, std::move(out));
  });
  if (!queued) {
    out.withdrawn.push_back("approval request NOT withdrawn (external pool full)");
    finish(run, std::move(out));
  }
}

void start_round(run_ptr run) {
  auto* svc = run->svc;
  bool queued = svc->db->try_submit([run](persistence::db_context& db) {
    auto row = persistence::load_operation(db, run->req.operation_id);
    if (row.outcome == db_outcome::not_found)
      return finish(run, status_only(end_status::not_found, "No such operation"));
    if (!row.ok()) return finish(run, status_only(end_status::unavailable, {}, "database: " + row.error.message));
    const auto& r = row.value;
    if (run->round == 0 && run->req.expected_version && *run->req.expected_version != r.version) {
      return finish(run, status_only(end_status::stale,
                                     "The operation moved on since you looked (version " + std::to_string(r.version) +
                                         ", you saw " + std::to_string(*run->req.expected_version) + " at step " +
                                         std::string(workflow::to_string(r.step)) + "); reload it and decide again"));
    }
    auto plan =
        plan_end(run->req.kind, r.step, run->req.by, r.approval_id && !r.approval_id->empty(), r.mr_iid.has_value());
    if (!plan.target) {
      auto out = status_only(plan.refusal, plan.message);
      out.from = out.to = r.step;
      out.version = r.version;
      return finish(run, std::move(out));
    }
    if (plan.read_mr) return close_mr_first(run, r, plan);
    write_end(run, r, *plan.target, plan);
  });
  if (!queued) finish(run, status_only(end_status::overloaded, {}));
}

}  // namespace

end_plan plan_end(end_kind kind, step current, workflow::actor_kind by, bool has_approval_id, bool has_mr) {
  end_plan plan;
  auto p = workflow::phase_of(current);
  auto target = target_of(kind);
  auto name = std::string(workflow::to_string(current));
  if (workflow::is_reappliable(p)) {
    if (current == target) {
      plan.refusal = end_status::already_ended;
      plan.message = kind == end_kind::cancel ? "The change is already cancelled" : "The change is already closed";
    } else if (p == phase::VALIDATED) {
      plan.refusal = end_status::merged_wins;
      plan.message = "The change merged and is in effect: merged wins";
    } else {
      plan.message = "The change already ended (" + std::string(workflow::to_string(p)) + ")";
    }
    return plan;
  }
  bool merged = p == phase::MERGED || current == step::DEPLOY_FAILED;
  if (!workflow::is_allowed(current, target, by)) {
    if (merged) {
      plan.refusal = end_status::merged_wins;
      plan.message = kind == end_kind::cancel
                         ? "The change has already merged: merged wins, it can no longer be cancelled"
                         : "The change has merged and is waiting for its deploy confirmation (" + name + ")";
    } else if (current == step::BATCH_CLAIMED) {
      plan.message = "The change is being merged in a batch MR together with others; it can be " +
                     std::string(kind == end_kind::cancel ? "cancelled" : "closed") +
                     " once that batch settles (operators can settle it from the batch view)";
    } else {
      plan.message = "Step " + name + " cannot be " + (kind == end_kind::cancel ? "cancelled" : "closed");
    }
    return plan;
  }
  plan.target = target;
  if (merged) return plan;  // nothing open remotely: the MR merged, only the confirmation is missing
  // A failure may have stopped the change before its approval was decided (a forced failure while
  // waiting, a failed submission): withdrawing a decided request is answered 409 and ignored, so ask.
  bool failed = p == phase::CREATE_FAILED || p == phase::HANDLE_FAILED;
  plan.withdraw_approval = has_approval_id && (workflow::is_awaiting_approval(p) || failed);
  plan.read_mr = has_mr;
  return plan;
}

void end_change(runtime::services& svc, end_request req, std::function<void(end_result)> done) {
  auto run = std::make_shared<run_state>();
  run->svc = &svc;
  run->req = std::move(req);
  run->done = std::move(done);
  start_round(std::move(run));
}

}  // namespace changeflow::service
