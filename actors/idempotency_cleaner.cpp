#include "actors/idempotency_cleaner.hpp"

#include "base/log.hpp"
#include "persistence/idempotency_repo.hpp"

namespace changeflow::actors {

namespace {

constexpr int max_batches_per_pass = 50;  // bounds one pass; the rest waits for the next one

void clean(persistence::db_context& db, runtime::services& svc) {
  auto batch = static_cast<int>(svc.config->current()->idempotency().cleanup_batch);
  int total = 0;
  for (int i = 0; i < max_batches_per_pass; ++i) {
    auto r = persistence::idem_delete_expired(db, batch);
    if (!r.ok()) {
      log::warn("idempotency.cleanup_failed", {{"error", r.error.message}});
      break;
    }
    total += r.value;
    if (r.value < batch) break;
  }
  if (total == 0) return;
  svc.metrics->inc("changeflow_idempotency_expired_deleted_total", "Expired idempotency records deleted", {},
                   static_cast<double>(total));
  log::info("idempotency.cleanup", {{"deleted", total}});
}

}  // namespace

void start_idempotency_cleanup(runtime::services& svc, periodic_job& job) {
  periodic_spec spec;
  spec.name = "idempotency_cleanup";
  spec.interval_ms = [&svc] { return svc.config->current()->idempotency().cleanup_interval_ms; };
  spec.first_at_once = false;
  spec.start_pass = db_pass(*svc.db, job.stop_flag(), spec.name, [&svc](persistence::db_context& db) {
    clean(db, svc);
    return false;
  });
  job.start(*svc.system, std::move(spec));
}

}  // namespace changeflow::actors
