#pragma once
// Reconciliation of lost deploy callbacks and the one place that turns a
// "validated" flip into the business metric.
//
// The inference. A MERGED operation whose deploy callback never came is stuck. The deploy callback
// table records MR numbers only; the job compares each MERGED operation's MR number with the
// watermark, the largest MR number of the project that was called back successfully:
//   mr_iid <= watermark -> VALIDATED (mark_validated, via "reconciliation")
//   mr_iid >  watermark -> stay MERGED, look again next run
// mr_iid == watermark means its own callback arrived (and overtook our MERGED write); mr_iid <
// watermark means a later MR was deployed, and since MR numbers increase within a project, the
// earlier MR's callback was lost. This holds ONLY while the deploy pipeline runs in merge order and
// a later run never skips changes merged before it. If that condition ever breaks (parallel or
// cherry-picked deploys), set reconcile.interval_ms <= 0 and validate by callback only.
//
// The window. Only MERGED rows last changed inside (now - max_age, now - min_age) (database clock):
// younger rows may have their callback still on the way (min_age keeps "late" from being taken for
// "lost"); older ones fall out so the work per run stays bounded. Two queries per run, no per-row
// lookups: the bulk operation -> mr_iid read and the watermark.
//
// Exactly once. Callback path and reconciliation call the same mark_validated (operation row lock,
// then binding); only the caller whose call flipped MERGED -> VALIDATED gets a value and counts
// changeflow_validated_total{via}, after mark_validated committed.

#include "actors/periodic_job.hpp"
#include "persistence/operation_repo.hpp"
#include "runtime/services.hpp"

#include <caf/actor.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace changeflow::actors {

enum class validation_path { callback, reconciliation };
std::string_view to_string(validation_path p);

/// `changeflow_validated_total{via}` +1: called once per flip, by the caller whose write made it,
/// after it committed (the only place the counter moves).
void count_validated(metrics::registry& metrics, validation_path via);

/// mark_validated, then `changeflow_validated_total{via}` +1 only when THIS call flipped the
/// binding (the flip is committed when mark_validated returns). Value: whether it flipped. With
/// `settle`, a flip also classifies that delivery's ledger row in the same transaction, and
/// `*settled` says whether it did.
persistence::db_result<bool> validate_and_count(persistence::session db, const std::string& operation_id,
                                                validation_path via, metrics::registry& metrics,
                                                const persistence::ledger_settlement* settle = nullptr,
                                                bool* settled = nullptr);

/// A merged operation whose deploy failed: MERGED -> DEPLOY_FAILED, guarded by the version in `row`
/// (a concurrent writer wins and this call does nothing). Value: whether this call moved it.
persistence::db_result<bool> mark_deploy_failed(persistence::session db, const persistence::operation_row& row,
                                                std::int64_t mr_iid, std::optional<std::int64_t> pipeline_id);

/// Whether the writer of MERGED must run validate_if_already_deployed: always, unless the row its
/// write committed (read in the same round trip) is at hand at `merged_version` and carries no mark
/// of a deploy report that came before it (migration 17: every unit that records such a report
/// marks the row under its lock, so a report committed before the MERGED write is on that row, and
/// one after it found MERGED and validated the change itself). Never when that row is already
/// VALIDATED: a deploy report in the same group commit, applied after the MERGED write, validated it.
bool deploy_check_needed(const persistence::operation_row* committed, std::int64_t merged_version);

/// For the writer of MERGED (request actor / batch coordinator), right after that commit: when the
/// MR's deploy callback already arrived (it overtook our write and was answered OUT_OF_ORDER),
/// apply it now instead of waiting for reconciliation (min_age) or the deploy timeout: a success
/// validates, a failure (with no success recorded) moves the operation to DEPLOY_FAILED.
/// Value: whether the operation was validated. With `merged_version` (the version the MERGED write
/// committed) the check and the flip are one round trip (persistence::validate_if_deployed).
persistence::db_result<bool> validate_if_already_deployed(persistence::session db, const std::string& operation_id,
                                                          std::int64_t mr_iid, const std::string& project,
                                                          metrics::registry& metrics,
                                                          std::optional<std::int64_t> merged_version = std::nullopt);

/// Pure core of one run: which candidates the watermark covers and which keep waiting.
struct reconcile_plan {
  std::vector<std::string> validate;
  std::vector<std::string> wait;
};
reconcile_plan plan_reconciliation(const std::vector<persistence::merged_candidate>& candidates,
                                   std::optional<std::int64_t> watermark);

struct reconcile_settings {
  int min_age_s = 300;
  int max_age_s = 86400;
  /// Rows per run: the oldest first; the rest waits for the next run (bounded work per run).
  int limit = 1000;
  /// The GitLab projects our MRs live in (every configured repository); MR numbers, and so the
  /// watermark, are per project, and each project is reconciled against its own.
  std::vector<std::string> projects;
};
reconcile_settings reconcile_settings_from(const config::snapshot& snap);

struct reconcile_report {
  bool ok = true;
  std::string error;
  std::string trigger;  // "timer" | "manual"
  int scanned = 0;      // MERGED rows in the window
  int validated = 0;    // flipped by this run
  int already = 0;      // covered by the watermark, but someone else flipped first (or replaced)
  int waiting = 0;      // above the watermark: stay MERGED
  int failed = 0;       // mark_validated errors (retried next run)
  /// Per project; `watermark` is the one project's when exactly one is reconciled.
  std::map<std::string, std::optional<std::int64_t>> watermarks;
  std::optional<std::int64_t> watermark;
};
nlohmann::json to_json(const reconcile_report& r);

/// One run on `db` (a db-pool worker's session). Counts changeflow_reconcile_runs_total.
reconcile_report run_reconciliation(persistence::session db, const reconcile_settings& s, metrics::registry& metrics,
                                    std::string trigger);

/// Queues one run on the db pool (never on an actor thread); `done` runs on the db worker.
/// False when the pool is full or stopping. Timer and manual runs may overlap safely.
bool submit_reconciliation(runtime::services& svc, std::string trigger, std::function<void(reconcile_report)> done);

/// The periodic job: a run every reconcile.interval_ms (hot; <= 0 -> disabled), the next one armed
/// only after the previous finished (actors/periodic_job.hpp).
void start_reconciler(runtime::services& svc, periodic_job& job);

}  // namespace changeflow::actors
