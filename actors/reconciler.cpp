#include "actors/reconciler.hpp"

#include "base/log.hpp"
#include "persistence/reconcile_repo.hpp"

#include <caf/all.hpp>

#include <chrono>

namespace changeflow::actors {

namespace {
using reconcile_tick_atom = caf::atom_constant<caf::atom("rc_tick")>;
using reconcile_done_atom = caf::atom_constant<caf::atom("rc_done")>;

}  // namespace

std::string_view to_string(validation_path p) {
  return p == validation_path::callback ? "callback" : "reconciliation";
}

void count_validated(metrics::registry& metrics, validation_path via) {
  metrics.inc("changeflow_validated_total", "Operations validated (MERGED -> VALIDATED), by path",
              {{"via", std::string(to_string(via))}});
}

persistence::db_result<bool> validate_and_count(persistence::session db, const std::string& operation_id,
                                                validation_path via, metrics::registry& metrics,
                                                const persistence::ledger_settlement* settle, bool* settled) {
  auto r = persistence::mark_validated(db, operation_id, std::string(to_string(via)), settle);
  if (!r.ok()) return persistence::db_result<bool>::failure(r.error);
  if (!r.value) return persistence::db_result<bool>::success(false);
  if (settled) *settled = r.value->settled;
  count_validated(metrics, via);  // the flip is committed and this call made it
  return persistence::db_result<bool>::success(true);
}

bool deploy_check_needed(const persistence::operation_row* committed, std::int64_t merged_version) {
  if (committed && committed->phase == workflow::phase::VALIDATED) return false;
  return !committed || committed->version != merged_version || committed->deploy_reported;
}

persistence::db_result<bool> validate_if_already_deployed(persistence::session db, const std::string& operation_id,
                                                          std::int64_t mr_iid, const std::string& project,
                                                          metrics::registry& metrics,
                                                          std::optional<std::int64_t> merged_version) {
  using R = persistence::db_result<bool>;
  if (merged_version) {
    auto checked = persistence::validate_if_deployed(db, operation_id, *merged_version, project, mr_iid);
    if (!checked.ok()) return R::failure(checked.error);
    if (checked.value.validated) {
      count_validated(metrics, validation_path::callback);
      return R::success(true);
    }
    if (!checked.value.failed_pipeline) return R::success(false);
    auto row = persistence::load_operation(db, operation_id);
    if (!row.ok()) return R::failure(row.error);
    if (row.value.phase != workflow::phase::MERGED) return R::success(false);
    const auto pipeline = *checked.value.failed_pipeline;
    auto moved = mark_deploy_failed(db, row.value, mr_iid, pipeline ? std::optional(pipeline) : std::nullopt);
    if (!moved.ok()) return R::failure(moved.error);
    return R::success(false);
  }
  auto deployed = persistence::deploy_succeeded(db, project, mr_iid, operation_id);
  if (!deployed.ok()) return R::failure(deployed.error);
  if (deployed.value) return validate_and_count(db, operation_id, validation_path::callback, metrics);
  auto failed = persistence::deploy_failed_pipeline(db, project, mr_iid, operation_id);
  if (!failed.ok()) return R::failure(failed.error);
  if (!failed.value) return R::success(false);
  auto row = persistence::load_operation(db, operation_id);
  if (!row.ok()) return R::failure(row.error);
  if (row.value.phase != workflow::phase::MERGED) return R::success(false);
  auto moved = mark_deploy_failed(db, row.value, mr_iid, *failed.value ? std::optional(*failed.value) : std::nullopt);
  if (!moved.ok()) return R::failure(moved.error);
  return R::success(false);
}

persistence::db_result<bool> mark_deploy_failed(persistence::session db, const persistence::operation_row& row,
                                                std::int64_t mr_iid, std::optional<std::int64_t> pipeline_id) {
  using R = persistence::db_result<bool>;
  persistence::transition_request t;
  t.operation_id = row.operation_id;
  t.expected_version = row.version;
  t.from = row.step;
  t.to = workflow::step::DEPLOY_FAILED;
  t.cause = "deploy pipeline" + (pipeline_id ? " " + std::to_string(*pipeline_id) : std::string()) +
            " failed for MR !" + std::to_string(mr_iid);
  t.actor = "callback:deploy";
  t.last_error = t.cause;
  t.clear_wake = true;
  auto r = persistence::transition(db, t);
  if (r.ok()) return R::success(true);
  if (r.outcome == persistence::db_outcome::preempted || r.outcome == persistence::db_outcome::illegal_transition) {
    return R::success(false);  // moved on meanwhile (validated, closed, already failed)
  }
  return R::failure(r.error);
}

reconcile_plan plan_reconciliation(const std::vector<persistence::merged_candidate>& candidates,
                                   std::optional<std::int64_t> watermark) {
  reconcile_plan plan;
  for (const auto& c : candidates) {
    // See the header: <= watermark means its own callback arrived or a later MR's did (deploys
    // run in merge order), so this one's was lost. No watermark yet: nothing can be inferred.
    if (watermark && c.mr_iid <= *watermark) {
      plan.validate.push_back(c.operation_id);
    } else {
      plan.wait.push_back(c.operation_id);
    }
  }
  return plan;
}

reconcile_settings reconcile_settings_from(const config::snapshot& snap) {
  reconcile_settings s;
  s.min_age_s = static_cast<int>(snap.reconcile().min_age_seconds);
  s.max_age_s = static_cast<int>(snap.reconcile().max_age_seconds);
  for (const auto& repo : snap.repositories().all) s.projects.push_back(repo.project);
  return s;
}

nlohmann::json to_json(const reconcile_report& r) {
  nlohmann::json j = {{"trigger", r.trigger},
                      {"scanned", r.scanned},
                      {"validated", r.validated},
                      {"alreadyValidated", r.already},
                      {"waiting", r.waiting},
                      {"failed", r.failed},
                      {"watermark", r.watermark ? nlohmann::json(*r.watermark) : nlohmann::json(nullptr)}};
  nlohmann::json per_project = nlohmann::json::object();
  for (const auto& [project, w] : r.watermarks) per_project[project] = w ? nlohmann::json(*w) : nlohmann::json(nullptr);
  j["watermarks"] = std::move(per_project);
  return j;
}

reconcile_report run_reconciliation(persistence::session db, const reconcile_settings& s, metrics::registry& metrics,
                                    std::string trigger) {
  reconcile_report rep;
  rep.trigger = std::move(trigger);
  auto fail = [&](const persistence::db_error& e) {
    rep.ok = false;
    rep.error = e.message;
    metrics.inc("changeflow_reconcile_runs_total", "Reconciliation runs by trigger and result",
                {{"trigger", rep.trigger}, {"result", "error"}});
    log::warn("reconcile.failed", {{"trigger", rep.trigger}, {"error", rep.error}});
    return rep;
  };
  for (const auto& project : s.projects) {
    // Query 1 of 2: operation -> mr_iid of every MERGED row of this project in the window, in bulk.
    auto candidates = persistence::merged_in_window(db, project, s.min_age_s, s.max_age_s, s.limit);
    if (!candidates.ok()) return fail(candidates.error);
    rep.scanned += static_cast<int>(candidates.value.size());
    // Query 2 of 2: the project's watermark. Read after the candidates so a callback that lands in
    // between can only raise it (never makes the inference claim more than it knows).
    auto watermark = persistence::deploy_watermark(db, project);
    if (!watermark.ok()) return fail(watermark.error);
    rep.watermarks[project] = watermark.value;
    if (s.projects.size() == 1) rep.watermark = watermark.value;

    auto plan = plan_reconciliation(candidates.value, watermark.value);
    rep.waiting += static_cast<int>(plan.wait.size());
    for (const auto& id : plan.validate) {
      auto r = validate_and_count(db, id, validation_path::reconciliation, metrics);
      if (!r.ok()) {
        ++rep.failed;
        if (r.outcome == persistence::db_outcome::retryable && r.error.code != 1213 && r.error.code != 1205) {
          return fail(r.error);  // the connection is gone: stop, the next run picks the rest up
        }
        continue;
      }
      ++(r.value ? rep.validated : rep.already);
    }
  }
  metrics.inc("changeflow_reconcile_runs_total", "Reconciliation runs by trigger and result",
              {{"trigger", rep.trigger}, {"result", "ok"}});
  metrics.set("changeflow_reconcile_waiting", "MERGED operations in the window above the watermark", {},
              static_cast<double>(rep.waiting));
  log::info("reconcile.run", {{"trigger", rep.trigger},
                              {"scanned", rep.scanned},
                              {"validated", rep.validated},
                              {"already", rep.already},
                              {"waiting", rep.waiting},
                              {"failed", rep.failed},
                              {"projects", static_cast<int>(s.projects.size())},
                              {"watermark", rep.watermark ? nlohmann::json(*rep.watermark) : nlohmann::json(nullptr)}});
  return rep;
}

bool submit_reconciliation(runtime::services& svc, std::string trigger, std::function<void(reconcile_report)> done) {
  auto settings = reconcile_settings_from(*svc.config->current());
  auto* metrics = svc.metrics;
  return svc.db->try_submit(
      [settings, metrics, trigger = std::move(trigger), done = std::move(done)](persistence::db_context& db) {
        auto rep = run_reconciliation(db, settings, *metrics, trigger);
        if (done) done(std::move(rep));
      });
}

void start_reconciler(runtime::services& svc, periodic_job& job) {
  periodic_spec spec;
  spec.name = "reconcile";
  spec.interval_ms = [&svc] { return svc.config->current()->reconcile().interval_ms; };
  // The first run waits one interval: start-up has enough to do, and min_age skips fresh rows anyway.
  spec.first_at_once = false;
  spec.start_pass = [&svc, stopped = job.stop_flag()](pass_done done) {
    if (*stopped) return false;
    return submit_reconciliation(svc, "timer", [done](const reconcile_report&) { done(false); });
  };
  job.start(*svc.system, std::move(spec));
}

}  // namespace changeflow::actors
