#include "service/attention.hpp"
#include "actors/registry.hpp"

#include <algorithm>
#include <set>

namespace changeflow::service {

using workflow::step;

std::string_view to_string(attention_reason r) {
  switch (r) {
    case attention_reason::failed: return "FAILED";
    case attention_reason::outcome_unknown: return "OUTCOME_UNKNOWN";
    case attention_reason::late_wait: return "LATE_WAIT";
    case attention_reason::overdue_approval: return "OVERDUE_APPROVAL";
    case attention_reason::stuck_actor: return "STUCK_ACTOR";
    case attention_reason::callback_unapplied: return "CALLBACK_UNAPPLIED";
  }
  return "FAILED";
}

namespace {

constexpr attention_reason all_reasons[] = {attention_reason::failed,      attention_reason::outcome_unknown,
                                            attention_reason::late_wait,   attention_reason::overdue_approval,
                                            attention_reason::stuck_actor, attention_reason::callback_unapplied};

bool outcome_unknown(step s) {
  return s == step::CREATE_PIPELINE_PENDING || s == step::HANDLE_PIPELINE_PENDING || s == step::REBASE_PENDING ||
         s == step::DEPLOY_TIMEOUT;
}

/// Failures and unknown outcomes: the steps an operator has to decide on.
std::vector<step> decision_steps() {
  std::vector<step> out;
  for (auto s : workflow::all_steps) {
    auto p = workflow::phase_of(s);
    if (p == workflow::phase::CREATE_FAILED || p == workflow::phase::HANDLE_FAILED || outcome_unknown(s))
      out.push_back(s);
  }
  return out;
}

std::string callback_words(const persistence::callback_ledger_row& c) {
  if (c.outcome == "IGNORED_STALE")
    return "nothing: ignored as stale (the change had already moved on, or no change matched it); check the sender "
           "if a change still waits for it";
  if (c.outcome == "OUT_OF_ORDER")
    return "the change to reach the step it reports on (it arrived early); reconciliation applies it later";
  if (c.outcome == "ID_REUSED")
    return "the sender: it reused a delivery id of another operation, so it was refused (409) and not applied";
  if (c.outcome == "DEPLOY_FAILED") return "an operator: the deploy pipeline reported a failure";
  if (c.outcome == "PENDING")
    return "recorded but never applied (the service stopped while applying it): a redelivery or reconciliation "
           "applies it";
  return "an operator to look at it (" + c.outcome + ")";
}

attention_item from_row(attention_reason reason, const persistence::operation_row& r) {
  attention_item i;
  i.reason = reason;
  i.operation_id = r.operation_id;
  i.title = r.title;
  i.step = r.step;
  i.since_ms = r.updated_at_ms;
  i.last_error = r.last_error;
  i.last_error_status = r.last_error_status;
  i.last_error_at_ms = r.last_error_at_ms;
  i.waits_for = waits_for(r.step);
  return i;
}

}  // namespace

std::string waits_for(step s) {
  switch (s) {
    case step::APPROVAL_SENDING: return "the approval system to take the request (retried until it answers)";
    case step::APPROVAL_SENT: return "the approver's decision (approval callback) before the approval deadline";
    case step::APPROVAL_APPROVED: return "the next step to start (MR creation or batch admission)";
    case step::CREATE_STARTED: return "GitLab to create the branch, commit and MR (retried on errors)";
    case step::CREATE_MR_OPENED: return "the MR's check pipeline to finish";
    case step::CREATE_SUCCEEDED: return "GitLab to accept the bots' approvals (legacy order: the approval request)";
    case step::HANDLE_STARTED: return "GitLab to accept the bots' approvals";
    case step::HANDLE_APPROVED:
    case step::HANDLE_MERGING: return "GitLab to merge the MR (its pipeline on the head SHA must pass)";
    case step::HANDLE_REBASING: return "GitLab to finish the rebase";
    case step::CREATE_PIPELINE_PENDING:
      return "a human: the check pipeline never finished within the poll budget (still re-checked); fix the runner "
             "and re-trigger, or close";
    case step::HANDLE_PIPELINE_PENDING:
      return "a human: the MR never became mergeable within the poll budget (still re-checked); re-trigger or "
             "close";
    case step::REBASE_PENDING: return "a human: the rebase never finished within the poll budget; re-trigger or close";
    case step::DEPLOY_TIMEOUT:
      return "the deploy confirmation (callback or reconciliation), or an operator who confirms it is in effect "
             "or closes it";
    case step::BATCH_WAITING: return "the batch coordinator to claim it into a batch";
    case step::BATCH_CLAIMED: return "its batch MR to merge";
    case step::HANDLE_MERGED:
    case step::HANDLE_ALREADY_MERGED:
    case step::BATCH_MERGED: return "the deploy pipeline's confirmation (callback or reconciliation)";
    default: break;
  }
  auto p = workflow::phase_of(s);
  if (p == workflow::phase::CREATE_FAILED || p == workflow::phase::HANDLE_FAILED) {
    if (workflow::is_deterministic_failure(s))
      return "an operator: this failure repeats if re-triggered as it is (fix the cause first), or close the "
             "change to free its target";
    return "an operator: re-trigger the step (the failure may be transient), or close the change to free its "
           "target";
  }
  return "nothing: the change has ended";
}

attention_settings attention_settings_from(const config::snapshot& snap) {
  attention_settings s;
  s.late_after_s = static_cast<int>(snap.ops().attention_late_after_s);
  s.approval_after_s = static_cast<int>(snap.ops().attention_approval_after_s);
  return s;
}

persistence::db_result<attention_report> read_attention_report(persistence::session db, runtime::services& svc,
                                                               const attention_settings& settings) {
  using R = persistence::db_result<attention_report>;
  persistence::attention_query q;
  q.decision_steps = decision_steps();
  q.late_after_s = settings.late_after_s;
  q.approval_after_s = settings.approval_after_s;
  q.callback_outcomes = {"IGNORED_STALE", "OUT_OF_ORDER", "ID_REUSED"};
  q.pending_callback_after_s = std::max(settings.late_after_s, 1);
  q.limit = settings.limit;
  auto rows = persistence::read_attention(db, q);
  if (!rows.ok()) return R::failure(rows.error);
  attention_report out;
  out.now_ms = rows.value.now_ms;
  const auto limit = static_cast<std::size_t>(settings.limit);
  out.truncated = rows.value.decisions.size() >= limit || rows.value.late_waits.size() >= limit ||
                  rows.value.overdue_approvals.size() >= limit || rows.value.callbacks.size() >= limit;
  std::set<std::string> listed;  // one item per operation: the first, most specific reason wins
  for (const auto& r : rows.value.decisions) {
    auto reason = outcome_unknown(r.step) ? attention_reason::outcome_unknown : attention_reason::failed;
    auto i = from_row(reason, r);
    if (r.next_wake_at_ms) {
      i.due_ms = r.next_wake_at_ms;
      i.due_label = "next check";
    }
    out.items.push_back(std::move(i));
    listed.insert(r.operation_id);
  }
  for (const auto& r : rows.value.overdue_approvals) {
    if (!listed.insert(r.operation_id).second) continue;
    auto i = from_row(attention_reason::overdue_approval, r);
    i.waits_for = "the approver's decision on approval " + r.approval_id.value_or("(no id yet)") +
                  " (unanswered for longer than ops.attention_approval_after_s); ask the approver, resend, or close";
    i.due_ms = r.next_wake_at_ms;
    i.due_label = "deadline";
    out.items.push_back(std::move(i));
  }
  // The stored wake is the durable copy of a wait; while an actor polls (a pipeline, a merge) its
  // timer lives in memory and the row's wake falls behind on purpose (a write per poll would cost a
  // commit each). So a passed wake means "late" only where no actor can be driving the change: no
  // live actor here for a change this instance owns, or an owner whose lease has expired. A live
  // actor here whose own timer is late is listed below as a stuck actor; an actor of another live
  // instance is that instance's to report.
  auto instances = persistence::list_instances(db);
  if (!instances.ok()) return R::failure(instances.error);
  std::set<std::string> live_owners;
  for (const auto& i : instances.value) {
    if (i.lease_live) live_owners.insert(i.instance_id);
  }
  for (const auto& r : rows.value.late_waits) {
    if (!workflow::needs_actor(r.step)) continue;  // driven through the database, not a timer
    const auto owner = r.owner_instance.value_or("");
    if (owner == svc.instance_id ? svc.actors->summary(r.operation_id).has_value() : live_owners.count(owner) > 0)
      continue;
    if (!listed.insert(r.operation_id).second) continue;
    auto i = from_row(attention_reason::late_wait, r);
    i.waits_for = "its timer: " + waits_for(r.step) + "; the stored wake passed and nothing ran (" +
                  (owner.empty()              ? std::string("no owner")
                   : owner == svc.instance_id ? "no live actor on " + owner
                                              : "its owner " + owner + " is gone") +
                  "); a re-trigger resumes it";
    i.due_ms = r.next_wake_at_ms;
    i.due_label = "was due";
    out.items.push_back(std::move(i));
  }
  // Live actors whose own timer is overdue: the row may look fine, the actor is not moving.
  const auto late_ms = static_cast<std::int64_t>(settings.late_after_s) * 1000;
  const auto app_now = svc.now_ms();
  auto stuck = svc.actors->list(
      [&](const actors::live_summary& s) { return s.next_wake_ms > 0 && s.next_wake_ms < app_now - late_ms; }, limit);
  for (const auto& s : stuck) {
    if (!listed.insert(s.operation_id).second) continue;
    attention_item i;
    i.reason = attention_reason::stuck_actor;
    i.operation_id = s.operation_id;
    i.step = workflow::step_from_code(s.step);
    i.since_ms = s.step_entered_ms ? s.step_entered_ms : s.spawned_ms;
    i.due_ms = s.next_wake_ms;
    i.due_label = "was due";
    i.waits_for = std::string("its live actor on ") + svc.instance_id + (s.busy ? " (busy with a call or write)" : "") +
                  ": the timer was due and has not run";
    if (!s.last_error.empty()) i.last_error = s.last_error;
    out.items.push_back(std::move(i));
  }
  for (const auto& c : rows.value.callbacks) {
    attention_item i;
    i.reason = attention_reason::callback_unapplied;
    i.operation_id = c.operation_id.value_or("");
    i.since_ms = c.received_at_ms;
    i.delivery_id = c.delivery_id;
    i.callback_kind = c.kind;
    i.callback_outcome = c.outcome;
    i.waits_for = callback_words(c);
    out.items.push_back(std::move(i));
  }
  std::stable_sort(out.items.begin(), out.items.end(),
                   [](const attention_item& a, const attention_item& b) { return a.since_ms < b.since_ms; });
  for (auto r : all_reasons) out.counts[std::string(to_string(r))] = 0;
  for (const auto& i : out.items) ++out.counts[std::string(to_string(i.reason))];
  return R::success(std::move(out));
}

}  // namespace changeflow::service
