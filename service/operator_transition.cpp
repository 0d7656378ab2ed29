#include "service/operator_transition.hpp"

#include "service/wake_actor.hpp"

namespace changeflow::service {

transition_result apply_operator_transition(persistence::session db, runtime::services& svc,
                                            const persistence::operation_row& row, const operator_transition& t) {
  persistence::transition_request w;
  w.operation_id = row.operation_id;
  w.expected_version = row.version;
  w.from = row.step;
  w.to = t.to;
  w.by = workflow::actor_kind::operator_only;
  w.cause = t.cause.substr(0, 250);
  w.actor = ("operator:" + t.operator_name).substr(0, 160);
  w.instance_id = svc.instance_id;
  // A stored deadline would delay the resume: the step runs now.
  w.clear_wake = true;
  if (t.rerun) {
    w.attempts = 0;  // a fresh poll budget
  } else if (!t.reason.empty()) {
    w.last_error = "operator: " + t.reason;
  }
  transition_result out;
  auto r = persistence::transition(db, w);
  if (r.outcome == persistence::db_outcome::preempted) {
    out.status = transition_status::preempted;
    return out;
  }
  if (r.outcome == persistence::db_outcome::illegal_transition) {
    out.status = transition_status::refused;
    return out;
  }
  if (!r.ok()) {
    out.error = r.error;
    return out;
  }
  out.status = transition_status::done;
  out.version = r.value;
  out.actor = wake_actor(db, svc, row.operation_id, t.to, t.cause);
  return out;
}

}  // namespace changeflow::service
