#include "service/operator_action.hpp"

#include "base/log.hpp"
#include "persistence/audit_repo.hpp"
#include "persistence/operation_repo.hpp"
#include "service/end_change.hpp"
#include "service/operator_transition.hpp"

#include <memory>
#include <utility>

namespace changeflow::service {

namespace {

using persistence::db_outcome;
using workflow::step;

void audit(persistence::session db, const std::string& op, const std::string& action, const std::string& target,
           const nlohmann::json& params, const std::string& outcome, const std::string& dedup_key) {
  persistence::audit_entry e;
  e.operator_name = op;
  e.action = action;
  e.target = target;
  e.params_json = params.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  e.outcome = outcome;
  if (!dedup_key.empty()) e.dedup_key = dedup_key;
  auto r = persistence::insert_audit(db, e);
  if (!r.ok()) log::error("ops.audit_failed", {{"action", action}, {"target", target}, {"error", r.error.message}});
}

/// Ends an action that ran: the answer stored for replay (2xx only, so a refusal can be retried
/// after the state changed), the audit entry, then the caller's `done`.
void finish(persistence::session db, const operator_action& a, const action_result& r, const action_render& render,
            const action_done& done) {
  auto answer = render(r);
  if (!a.idem.key.empty()) finish_idempotent(db, a.idem, answer);
  auto outcome = audit_outcome(r);
  audit(db, a.operator_name, std::string(workflow::to_string(a.action)), a.operation_id, a.audit_params, outcome,
        outcome == "OK" && !a.idem.key.empty() ? a.idem.key : std::string());
  done(nullptr);
}

action_result refusal(action_status s, std::string message) {
  action_result r;
  r.status = s;
  r.message = std::move(message);
  return r;
}

/// One planned transition through service/operator_transition.
action_result apply(persistence::session db, runtime::services& svc, const persistence::operation_row& row, step to,
                    workflow::ops_action action, const std::string& operator_name, const std::string& reason,
                    const std::string& cause) {
  operator_transition t;
  t.operator_name = operator_name;
  t.to = to;
  t.cause = cause;
  t.rerun = action == workflow::ops_action::retrigger || action == workflow::ops_action::resend_approval;
  t.reason = reason;
  auto w = apply_operator_transition(db, svc, row, t);
  action_result r;
  r.from = row.step;
  r.to = to;
  switch (w.status) {
    case transition_status::preempted:
      return refusal(action_status::preempted, "The operation changed while you acted (it is no longer at " +
                                                   std::string(workflow::to_string(row.step)) + " v" +
                                                   std::to_string(row.version) + "); reload it and decide again");
    case transition_status::refused:
      return refusal(action_status::refused, "The transition table does not allow this action from " +
                                                 std::string(workflow::to_string(row.step)));
    case transition_status::failed:
      r.status = action_status::failed;
      r.error = w.error;
      return r;
    case transition_status::done: break;
  }
  r.status = action_status::done;
  r.version = w.version;
  r.actor = w.actor;
  return r;
}

std::string cause_of(std::string_view prefix, workflow::ops_action a, const std::string& reason) {
  std::string cause = std::string(prefix) + std::string(workflow::to_string(a));
  if (!reason.empty()) cause += ": " + reason;
  return cause;
}

/// The close result in the action vocabulary.
action_result from_end(const end_result& e) {
  action_result r;
  r.from = e.from;
  r.to = e.to;
  r.version = e.version;
  r.withdrawn = e.withdrawn;
  r.message = e.message;
  r.detail = e.detail;
  r.merged_wins = e.status == end_status::merged_wins;
  switch (e.status) {
    case end_status::ended:
    case end_status::merged_wins: r.status = e.written ? action_status::done : action_status::already_merged; break;
    case end_status::already_ended:
    case end_status::not_allowed: r.status = action_status::refused; break;
    case end_status::stale: r.status = action_status::preempted; break;
    case end_status::not_found: r.status = action_status::not_found; break;
    case end_status::overloaded: r.status = action_status::overloaded; break;
    case end_status::unavailable: r.status = action_status::unavailable; break;
  }
  return r;
}

/// Close is the requester's cancel with an operator's rank (service::end_change): close the MR unless
/// it merged (merged wins), the guarded write, then withdraw the approval. Its answer is stored and
/// audited on a database worker like every other action.
void run_close(runtime::services& svc, const persistence::operation_row& row, const operator_action& a,
               const action_render& render, const action_done& done) {
  end_request req;
  req.kind = end_kind::close;
  req.operation_id = row.operation_id;
  req.by = workflow::actor_kind::operator_only;
  req.actor = "operator:" + a.operator_name;
  req.reason = a.reason;
  req.expected_version = a.expected_version;
  auto* pool = svc.db;
  end_change(svc, req, [a, render, done, pool](end_result e) {
    auto r = from_end(e);
    bool queued = pool->try_submit(
        [a, r, render, done](persistence::db_context& db) { finish(persistence::session(db), a, r, render, done); });
    if (!queued) {
      // The close itself is over; only its audit and stored answer could not be queued.
      log::error("ops.close_finish_dropped", {{"operation_id", a.operation_id}});
      render(refusal(action_status::overloaded, {}));
      done(nullptr);
    }
  });
}

}  // namespace

std::string audit_outcome(const action_result& r) {
  switch (r.status) {
    case action_status::done: return "OK";
    case action_status::not_found: return "NOT_FOUND";
    case action_status::stale: return "STALE";
    case action_status::refused:
    case action_status::already_merged:
    case action_status::overloaded: return "REFUSED";
    case action_status::preempted: return "PREEMPTED";
    case action_status::unavailable:
    case action_status::failed: return "ERROR";
  }
  return "ERROR";
}

void run_operator_action(persistence::session db, runtime::services& svc, operator_action a, action_render render,
                         action_done done) {
  if (!a.idem.key.empty()) {
    // A record whose request died is taken over and the action runs again. It re-plans from the row
    // as it is now, through a version-guarded transition: when the dead request's transition
    // committed, fail and close find a step they cannot leave and are refused; retrigger and
    // resend_approval run the step once more, which is what they ask for; an expectedVersion turns
    // any re-run into STALE.
    auto gate = begin_idempotent(db, svc, a.idem);
    if (gate.verdict != gate_verdict::run) {
      if (gate.verdict != gate_verdict::replay) {
        audit(db, a.operator_name, std::string(workflow::to_string(a.action)), a.operation_id, a.audit_params,
              "REFUSED", {});
      }
      return done(&gate);
    }
  }
  auto row = persistence::load_operation(db, a.operation_id);
  if (row.outcome == db_outcome::not_found) {
    return finish(db, a, refusal(action_status::not_found, "No such operation"), render, done);
  }
  if (!row.ok()) {
    action_result r;
    r.error = row.error;
    return finish(db, a, r, render, done);
  }
  if (a.expected_version && *a.expected_version != row.value.version) {
    return finish(db, a,
                  refusal(action_status::stale,
                          "The operation moved on since you looked (version " + std::to_string(row.value.version) +
                              ", you saw " + std::to_string(*a.expected_version) + " at step " +
                              std::string(workflow::to_string(row.value.step)) + "); reload it and decide again"),
                  render, done);
  }
  auto plan = workflow::plan_action(a.action, row.value.step);
  if (!plan.target) return finish(db, a, refusal(action_status::refused, plan.refusal), render, done);
  if (a.action == workflow::ops_action::close) return run_close(svc, row.value, a, render, done);
  finish(db, a,
         apply(db, svc, row.value, *plan.target, a.action, a.operator_name, a.reason,
               cause_of("operator ", a.action, a.reason)),
         render, done);
}

bulk_result run_bulk_action(persistence::session db, runtime::services& svc, const bulk_action& b) {
  bulk_result out;
  auto rows = persistence::select_ops_operations(db, b.filter, bulk_cap);
  if (!rows.ok()) {
    out.error = rows.error;
    return out;
  }
  out.ok = true;
  std::vector<const persistence::operation_row*> eligible;
  for (const auto& r : rows.value) {
    if (workflow::plan_action(b.action, r.step).target) eligible.push_back(&r);
  }
  out.matched = rows.value.size();
  out.eligible = eligible.size();
  out.capped = rows.value.size() >= static_cast<std::size_t>(bulk_cap);
  for (std::size_t i = 0; i < eligible.size() && i < 100; ++i) out.sample_ids.push_back(eligible[i]->operation_id);
  const std::string name(workflow::to_string(b.action));
  if (b.dry_run) {
    audit(db, b.operator_name, "bulk-" + name, "dry-run", b.audit_params, "DRY_RUN:" + std::to_string(out.eligible),
          {});
    return out;
  }
  for (const auto* r : eligible) {
    auto params = b.audit_params;
    params["operationId"] = r->operation_id;
    auto target = *workflow::plan_action(b.action, r->step).target;
    auto result =
        apply(db, svc, *r, target, b.action, b.operator_name, b.reason, cause_of("operator bulk ", b.action, b.reason));
    auto outcome = audit_outcome(result);
    audit(db, b.operator_name, name, r->operation_id, params, outcome, {});
    ++out.outcomes[outcome];
  }
  nlohmann::json counts(out.outcomes);
  audit(db, b.operator_name, "bulk-" + name, "filter", b.audit_params, "APPLIED:" + counts.dump(), {});
  return out;
}

}  // namespace changeflow::service
