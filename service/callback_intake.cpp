#include "service/callback_intake.hpp"

#include "actors/reconciler.hpp"
#include "actors/request_actor.hpp"
#include "base/log.hpp"
#include "config/test_hooks.hpp"
#include "persistence/operation_repo.hpp"
#include "service/wake_actor.hpp"

namespace changeflow::service {

void count_callback(metrics::registry& m, std::string_view kind, std::string_view outcome) {
  m.inc("changeflow_callbacks_total", "Callbacks by kind and outcome",
        {{"kind", std::string(kind)}, {"outcome", std::string(outcome)}});
}

namespace {

/// A failed deploy is a failure, not "keep waiting": every named operation still waiting for its
/// confirmation moves to DEPLOY_FAILED (guarded by the version just read; a loser to a concurrent
/// writer has moved on and is left alone). It never raises the reconciliation watermark (that one
/// reads successes only).
persistence::db_result<deploy_intake> fail_deploys(persistence::session db, const persistence::deploy_callback_in& cb,
                                                   const std::vector<std::string>& candidates, deploy_intake out) {
  using R = persistence::db_result<deploy_intake>;
  out.outcome = persistence::deploy_outcome::IGNORED_STALE;
  auto rows = persistence::load_operations(db, candidates);
  if (!rows.ok()) return R::failure(rows.error);
  for (const auto& row : rows.value) {
    if (row.phase != workflow::phase::MERGED) {
      if (!workflow::is_terminal(row.phase)) out.outcome = persistence::deploy_outcome::OUT_OF_ORDER;
      continue;
    }
    auto moved = actors::mark_deploy_failed(db, row, cb.mr_iid, cb.pipeline_id);
    if (!moved.ok()) return R::failure(moved.error);
    if (moved.value) {
      out.outcome = persistence::deploy_outcome::DEPLOY_FAILED;
      ++out.failed;
    }
  }
  return R::success(out);
}

/// Runs after the delivery was recorded. The candidates are the operations the pipeline named, or
/// else the operations carrying this MR number in the callback's project when it is one of ours
/// (the MR -> operation mapping is ours, so this is an exact match, not an inference; MR numbers
/// are per project, so the project is part of the match).
persistence::db_result<deploy_intake> apply_deploy(persistence::session db, const persistence::deploy_callback_in& cb,
                                                   const std::vector<std::string>& named_ids,
                                                   const std::string& our_project, metrics::registry& metrics) {
  using R = persistence::db_result<deploy_intake>;
  using persistence::deploy_outcome;
  deploy_intake out;
  out.status = deploy_intake_status::applied;
  if (cb.status != "success" && cb.status != "failed") {
    out.outcome = deploy_outcome::IGNORED_STALE;  // running, canceled, ...: nothing settled yet
    return R::success(out);
  }
  std::vector<std::string> candidates = named_ids;
  if (candidates.empty() && !our_project.empty()) {
    auto by_mr = persistence::operations_for_mr(db, our_project, cb.mr_iid);
    if (!by_mr.ok()) return R::failure(by_mr.error);
    for (const auto& m : by_mr.value) candidates.push_back(m.operation_id);
  }
  out.matched = static_cast<int>(candidates.size());
  out.operation_ids = candidates;
  // Before anything is decided from their phase: a change not yet MERGED is marked, so its MERGED
  // writer checks the recorded reports (a MERGED committed before the mark is seen by the
  // decisions below instead).
  if (auto marked = persistence::mark_deploy_reported(db, candidates); !marked.ok()) return R::failure(marked.error);
  if (cb.status == "failed") return fail_deploys(db, cb, candidates, out);
  std::vector<std::string> not_flipped;
  // One matched change (the common case): its flip and the ledger's APPLIED commit together.
  std::optional<persistence::ledger_settlement> settle;
  if (candidates.size() == 1) {
    settle = persistence::ledger_settlement{persistence::deploy_ledger_key(cb.delivery_id),
                                            std::string(persistence::to_string(deploy_outcome::APPLIED)), candidates};
  }
  for (const auto& id : candidates) {
    auto r = actors::validate_and_count(db, id, actors::validation_path::callback, metrics, settle ? &*settle : nullptr,
                                        &out.settled);
    if (!r.ok() && r.outcome != persistence::db_outcome::not_found) return R::failure(r.error);
    if (r.ok() && r.value) {
      ++out.validated;
    } else {
      not_flipped.push_back(id);
    }
  }
  if (out.validated > 0) {
    out.outcome = deploy_outcome::APPLIED;
    return R::success(out);
  }
  // Nothing flipped. When an operation is still on its way to MERGED, the callback overtook our own
  // write (merge answered, MERGED not yet committed): OUT_OF_ORDER. Its MR number is recorded, so
  // reconciliation converges it once it is MERGED and older than min_age (mr_iid <= watermark).
  auto rows = persistence::load_operations(db, not_flipped);
  if (!rows.ok()) return R::failure(rows.error);
  out.outcome = deploy_outcome::IGNORED_STALE;
  for (const auto& row : rows.value) {
    if (!workflow::is_terminal(row.phase) && row.phase != workflow::phase::MERGED) {
      out.outcome = deploy_outcome::OUT_OF_ORDER;
    }
  }
  return R::success(out);
}

}  // namespace

namespace {

/// What an approval delivery's database answer means: counted, logged, remembered, and the actor woken.
approval_intake finish_approval(persistence::session db, runtime::services& svc, const approval_delivery& d,
                                delivery_claims* claims, const std::string& remembered,
                                const persistence::db_result<persistence::approval_applied>& r) {
  approval_intake out;
  if (!r.ok()) {
    out.error = r.error;
    return out;
  }
  out.ok = true;
  out.outcome = r.value.outcome;
  auto outcome = std::string(persistence::to_string(r.value.outcome));
  count_callback(*svc.metrics, "approval", outcome);
  log::info(
      "callback.approval",
      {{"operation_id", d.operation_id}, {"callback_id", d.delivery_id}, {"result", d.result}, {"outcome", outcome}});
  if (claims && r.value.outcome != persistence::callback_outcome::ID_REUSED) claims->settled(remembered);
  if (r.value.outcome == persistence::callback_outcome::APPLIED) {
    if (r.value.new_step == workflow::step::CREATE_STARTED) {
      // The decision's transaction went on in the workflow's place (approved_then_create): counted as
      // the actor counts its own committed transitions.
      actors::count_committed_transition(*svc.metrics, workflow::step::CREATE_STARTED);
    }
    // The decision moved the step only: the actor takes the new step and version from here.
    wake_actor(db, svc, d.operation_id, r.value.new_step, "approval callback", r.value.new_version,
               r.value.row ? &*r.value.row : nullptr, r.value.found_version);
  } else if (r.value.outcome == persistence::callback_outcome::DUPLICATE) {
    wake_actor(db, svc, d.operation_id, std::nullopt, "approval callback");
  }
  return out;
}

approval_intake duplicate_approval(runtime::services& svc) {
  count_callback(*svc.metrics, "approval", "DUPLICATE");
  approval_intake out;
  out.ok = true;
  out.outcome = persistence::callback_outcome::DUPLICATE;
  return out;
}

/// The key a delivery is remembered by: the operation is part of it, because the same id for
/// another operation is a reuse the ledger refuses.
std::string approval_key(const approval_delivery& d) {
  return "approval:" + d.delivery_id + ":" + d.operation_id;
}

/// An APPROVED decision goes on to CREATE_STARTED in its own transaction when the workflow's choice
/// at APPROVAL_APPROVED cannot be anything else from here: batching off (the rest, no MR yet and
/// the row owned by this instance, is checked in SQL).
std::optional<persistence::approved_then_create> then_create(runtime::services& svc, const approval_delivery& d) {
  if (d.decision != persistence::approval_result::APPROVED || svc.instance_id.empty() || !svc.config)
    return std::nullopt;
  auto snap = svc.config->current();
  if (!snap || snap->batch().enabled) return std::nullopt;
  return persistence::approved_then_create{svc.instance_id};
}

}  // namespace

approval_intake take_approval(persistence::session db, runtime::services& svc, const approval_delivery& d,
                              delivery_claims* claims) {
  const std::string remembered = approval_key(d);
  if (claims && claims->is_settled(remembered)) return duplicate_approval(svc);
  auto r = persistence::apply_approval_callback(db, d.delivery_id, d.operation_id, d.decision, d.payload,
                                                then_create(svc, d));
  return finish_approval(db, svc, d, claims, remembered, r);
}

bool take_approval_grouped(runtime::services& svc, const approval_delivery& d, std::shared_ptr<delivery_claims> claims,
                           std::function<void(approval_intake)> done) {
  if (!svc.transitions || !claims) return false;
  const std::string remembered = approval_key(d);
  // A copy of a delivery this process settled (its first copy is durable): answered here, on the
  // caller's thread, with no job on any pool; exactly what take_approval would answer from memory.
  if (claims->is_settled(remembered)) {
    done(duplicate_approval(svc));
    return true;
  }
  // A copy that arrives while this process applies the first one goes the pool's way (take_approval):
  // in a group it would wait on the first one's row lock and hold that group's commit back, and it
  // must not be answered before the first one is durable (the first may still fail).
  auto claim = std::make_shared<delivery_claims::scoped>(*claims, remembered);
  if (!claim->held()) return false;
  auto* services = &svc;
  auto unit = persistence::approval_callback_unit(
      d.delivery_id, d.operation_id, d.decision, d.payload,
      [services, d, claims, claim, remembered, done](persistence::db_context& db,
                                                     const persistence::db_result<persistence::approval_applied>& r) {
        done(finish_approval(db, *services, d, claims.get(), remembered, r));
      },
      then_create(svc, d));
  return svc.transitions->submit_unit(std::move(unit));
}

bool delivery_claims::claim(const std::string& id) {
  std::lock_guard lock(mutex_);
  if (settled_.count(id)) return false;
  return ids_.insert(id).second;
}

void delivery_claims::settled(const std::string& id) {
  std::lock_guard lock(mutex_);
  if (!settled_.insert(id).second) return;
  settled_order_.push_back(id);
  if (settled_order_.size() > remembered) {
    settled_.erase(settled_order_.front());
    settled_order_.pop_front();
  }
}

bool delivery_claims::is_settled(const std::string& id) {
  std::lock_guard lock(mutex_);
  return settled_.count(id) > 0;
}

void delivery_claims::release(const std::string& id) {
  std::lock_guard lock(mutex_);
  ids_.erase(id);
}

namespace {

/// Every deploy intake that got as far as an outcome ends here: status readers are told, the
/// ledger row is classified when the unit that applied it did not, and the outcome is counted and logged.
deploy_intake finish_deploy(persistence::session db, runtime::services& svc, delivery_claims& claims,
                            const persistence::deploy_callback_in& cb, deploy_intake out,
                            const persistence::operation_row* written = nullptr) {
  if (written && out.operation_ids.size() == 1 && svc.row_written_as) {
    svc.row_written_as(*written, 0);  // the one change it moved, as the flip left it
  } else if (svc.row_written) {
    for (const auto& id : out.operation_ids) svc.row_written(id);
  }
  auto outcome = std::string(persistence::to_string(out.outcome));
  // The ledger row names the operations it was matched to, so each change lists its deploy results.
  auto set = out.settled ? persistence::db_result<persistence::done>::success({})
                         : persistence::set_deploy_outcome(db, cb.delivery_id, out.outcome, out.operation_ids);
  if (!set.ok()) {
    log::warn("callback.deploy_outcome_not_recorded", {{"delivery_id", cb.delivery_id}, {"error", set.error.message}});
  } else {
    claims.settled(cb.delivery_id);
  }
  count_callback(*svc.metrics, "deploy", outcome);
  log::info("callback.deploy", {{"delivery_id", cb.delivery_id},
                                {"mr_iid", cb.mr_iid},
                                {"status", cb.status},
                                {"matched", out.matched},
                                {"validated", out.validated},
                                {"failed", out.failed},
                                {"outcome", outcome}});
  return out;
}

/// A delivery recorded but not yet classified (just now, or by an earlier delivery that died before
/// applying it): applied the general way.
deploy_intake apply_recorded_deploy(persistence::session db, runtime::services& svc, delivery_claims& claims,
                                    const deploy_delivery& d, const std::string& our_project,
                                    persistence::record_outcome recorded) {
  const auto& cb = d.cb;
  config::hold_for_test_hook(svc.config->current()->faults().hold_after_deploy_record_ms);
  if (recorded != persistence::record_outcome::inserted) {
    log::warn("callback.deploy_unapplied_redelivered", {{"delivery_id", cb.delivery_id}});
  }
  auto applied = apply_deploy(db, cb, d.operation_ids, our_project, *svc.metrics);
  if (!applied.ok()) {
    deploy_intake out;
    out.status = deploy_intake_status::apply_failed;
    out.error = applied.error;
    return out;
  }
  return finish_deploy(db, svc, claims, cb, applied.value);
}

deploy_intake duplicate_deploy(runtime::services& svc) {
  count_callback(*svc.metrics, "deploy", "DUPLICATE");
  deploy_intake out;
  out.status = deploy_intake_status::duplicate;
  return out;
}

/// What the one-change unit (record_and_settle_deploy, alone or in a group) answered, taken further:
/// what it could not classify is applied the general way.
deploy_intake settled_deploy(persistence::session db, runtime::services& svc, delivery_claims& claims,
                             const deploy_delivery& d, const std::string& our_project,
                             const persistence::db_result<persistence::deploy_settlement>& settled) {
  deploy_intake out;
  if (!settled.ok()) {
    out.error = settled.error;
    return out;
  }
  if (settled.value.recorded == persistence::record_outcome::duplicate) return duplicate_deploy(svc);
  if (settled.value.recorded != persistence::record_outcome::inserted || !settled.value.outcome) {
    return apply_recorded_deploy(db, svc, claims, d, our_project, settled.value.recorded);
  }
  out.status = deploy_intake_status::applied;
  out.outcome = *settled.value.outcome;
  out.matched = 1;
  out.operation_ids = d.operation_ids;
  out.settled = true;
  if (settled.value.validated) {
    out.validated = 1;
    actors::count_validated(*svc.metrics, actors::validation_path::callback);
  }
  return finish_deploy(db, svc, claims, d.cb, std::move(out), settled.value.row ? &*settled.value.row : nullptr);
}

}  // namespace

bool take_deploy_grouped(runtime::services& svc, std::shared_ptr<delivery_claims> claims, const deploy_delivery& d,
                         const std::string& our_project, std::function<void(deploy_intake)> done) {
  if (!svc.transitions || !claims || d.cb.status != "success" || d.operation_ids.size() != 1) return false;
  auto claim = std::make_shared<delivery_claims::scoped>(*claims, d.cb.delivery_id);
  if (!claim->held()) {
    done(duplicate_deploy(svc));
    return true;
  }
  auto* services = &svc;
  auto unit = persistence::deploy_settle_unit(
      d.cb, d.payload, d.operation_ids.front(),
      [services, claims, claim, d, our_project, done](persistence::db_context& db,
                                                      const persistence::db_result<persistence::deploy_settlement>& r) {
        done(settled_deploy(db, *services, *claims, d, our_project, r));
      });
  return svc.transitions->submit_unit(std::move(unit));
}

deploy_intake take_deploy(persistence::session db, runtime::services& svc, delivery_claims& claims,
                          const deploy_delivery& d, const std::string& our_project) {
  const auto& cb = d.cb;
  deploy_intake out;
  // A copy of a delivery this process is applying right now: answered at once, nothing read.
  delivery_claims::scoped claim(claims, cb.delivery_id);
  if (!claim.held()) return duplicate_deploy(svc);
  // A success naming one change (every single-change MR): recorded, applied and classified in one
  // round trip and one commit, so no crash can come between the record and its application. What
  // that unit could not classify is left PENDING and applied the general way.
  if (cb.status == "success" && d.operation_ids.size() == 1) {
    return settled_deploy(db, svc, claims, d, our_project,
                          persistence::record_and_settle_deploy(db, cb, d.payload, d.operation_ids.front()));
  }
  // Durable before anything else: the MR number (watermark) and the ledger row commit together.
  auto recorded = persistence::record_deploy_delivery(db, cb, d.payload);
  if (!recorded.ok()) {
    out.error = recorded.error;
    return out;
  }
  if (recorded.value == persistence::record_outcome::duplicate) return duplicate_deploy(svc);
  return apply_recorded_deploy(db, svc, claims, d, our_project, recorded.value);
}

}  // namespace changeflow::service
