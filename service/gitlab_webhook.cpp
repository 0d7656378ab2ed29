#include "service/gitlab_webhook.hpp"

#include "actors/registry.hpp"
#include "actors/request_actor.hpp"
#include "base/log.hpp"
#include "persistence/callback_repo.hpp"
#include "persistence/reconcile_repo.hpp"
#include "workflow/webhook_rule.hpp"

#include <caf/send.hpp>

namespace changeflow::service {

namespace {

constexpr const char* delivered = "DELIVERED";
constexpr const char* ignored = "IGNORED";

messages::gitlab_event signal_of(const gitlab_delivery& d) {
  messages::gitlab_event e;
  e.what = d.what == gitlab_delivery::kind::pipeline ? messages::gitlab_event::pipeline
                                                     : messages::gitlab_event::merge_request;
  e.sha = d.sha;
  e.status = d.status;
  e.action = d.action;
  return e;
}

/// A Deployment Hook whose commit a merge event mapped to an MR: the deploy callback's intake,
/// matched by project + MR number as that intake does.
gitlab_intake take_deployment(persistence::session db, runtime::services& svc, delivery_claims& claims,
                              const gitlab_delivery& d, std::int64_t mr_iid) {
  gitlab_intake out;
  deploy_delivery dd;
  dd.cb.delivery_id = d.delivery_id;
  dd.cb.project = d.project;
  dd.cb.mr_iid = mr_iid;
  dd.cb.pipeline_id = d.pipeline_id;
  dd.cb.status = d.status;
  dd.payload = d.payload;
  out.deploy = take_deploy(db, svc, claims, dd, d.project);
  out.error = out.deploy.error;
  switch (out.deploy.status) {
    case deploy_intake_status::applied:
      out.status = gitlab_intake_status::answered;
      out.outcome = std::string(persistence::to_string(out.deploy.outcome));
      break;
    case deploy_intake_status::duplicate: out.status = gitlab_intake_status::duplicate; break;
    case deploy_intake_status::record_failed: out.status = gitlab_intake_status::record_failed; break;
    case deploy_intake_status::apply_failed: out.status = gitlab_intake_status::apply_failed; break;
  }
  return out;
}

}  // namespace

gitlab_intake take_gitlab_event(persistence::session db, runtime::services& svc, delivery_claims& claims,
                                const gitlab_delivery& d, const tell_batch_fn& tell_batch) {
  gitlab_intake out;
  if (d.what == gitlab_delivery::kind::deployment) {
    // A commit no merge event named (the merge hook was lost, or the deploy is of something else)
    // is recorded below as IGNORED; reconciliation still converges the change.
    auto mr = persistence::mr_of_merge_commit(db, d.project, d.sha);
    if (!mr.ok()) {
      out.error = mr.error;
      return out;
    }
    if (mr.value) return take_deployment(db, svc, claims, d, *mr.value);
  }
  delivery_claims::scoped claim(claims, "gitlab:" + d.delivery_id);
  if (!claim.held()) {
    count_callback(*svc.metrics, "gitlab", "DUPLICATE");
    out.status = gitlab_intake_status::duplicate;
    return out;
  }

  // Durable before the 2xx; a merge event also records which commit the MR merged as, for the
  // Deployment Hook that will name only that commit.
  std::optional<persistence::merge_commit> merged;
  if (d.what == gitlab_delivery::kind::merge_request && d.action == "merge" && !d.merge_commit_sha.empty() &&
      d.mr_iid) {
    merged = persistence::merge_commit{d.project, d.merge_commit_sha, *d.mr_iid};
  }
  auto recorded = persistence::record_gitlab_delivery(db, d.delivery_id, d.payload, merged);
  if (!recorded.ok()) {
    out.error = recorded.error;
    return out;
  }
  if (recorded.value == persistence::record_outcome::duplicate) {
    count_callback(*svc.metrics, "gitlab", "DUPLICATE");
    out.status = gitlab_intake_status::duplicate;
    return out;
  }

  const auto signal = signal_of(d);
  std::vector<std::string> concerned;  // listed with the delivery on each change's page
  const bool may_wait = d.what == gitlab_delivery::kind::pipeline || d.what == gitlab_delivery::kind::merge_request;
  if (may_wait && workflow::worth_delivering(signal)) {
    if (d.mr_iid) {
      auto ops = persistence::operations_for_mr(db, d.project, *d.mr_iid);
      if (!ops.ok()) {
        out.status = gitlab_intake_status::apply_failed;
        out.error = ops.error;
        return out;
      }
      bool batch_mr = false;
      for (const auto& op : ops.value) {
        concerned.push_back(op.operation_id);
        batch_mr = batch_mr || op.step == workflow::step::BATCH_CLAIMED;
        if (auto actor = svc.actors->find(op.operation_id)) {
          caf::anon_send(caf::actor_cast<actors::request_actor>(*actor), signal);
          ++out.delivered;
        }
      }
      // A batch MR (its members carry its number while claimed) is driven by the coordinator, not
      // by request actors: the coordinator's drive of that MR is told.
      if (batch_mr && tell_batch) {
        tell_batch(d.project, *d.mr_iid);
        ++out.delivered;
      }
    } else {
      // A branch pipeline names no MR: the live actors whose MR head is this commit.
      auto live = svc.actors->list(
          [&](const actors::live_summary& s) { return s.repository == d.project && s.mr_sha == d.sha; }, 16);
      for (const auto& s : live) {
        concerned.push_back(s.operation_id);
        if (auto actor = svc.actors->find(s.operation_id)) {
          caf::anon_send(caf::actor_cast<actors::request_actor>(*actor), signal);
          ++out.delivered;
        }
      }
    }
  }
  out.status = gitlab_intake_status::answered;
  out.outcome = out.delivered > 0 ? delivered : ignored;
  auto set = persistence::set_gitlab_outcome(db, d.delivery_id, out.outcome, concerned);
  if (!set.ok()) {
    log::warn("webhook.gitlab_outcome_not_recorded", {{"delivery_id", d.delivery_id}, {"error", set.error.message}});
  }
  count_callback(*svc.metrics, "gitlab", out.outcome);
  log::info("webhook.gitlab", {{"delivery_id", d.delivery_id},
                               {"project", d.project},
                               {"mr_iid", d.mr_iid.value_or(0)},
                               {"sha", d.sha},
                               {"status", d.status},
                               {"action", d.action},
                               {"delivered", out.delivered},
                               {"outcome", out.outcome}});
  return out;
}

}  // namespace changeflow::service
